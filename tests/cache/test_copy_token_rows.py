"""copy_token_rows: the KV write as 8-byte words is the element-wise index_copy_, bit for bit (issue #19)."""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache.table import _as_words, copy_token_rows


def _buffers(dtype, heads, head_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    dst = torch.randn(2, 40, heads, head_dim, generator=g).to(dtype)
    src = torch.randn(2, 7, heads, head_dim, generator=g).to(dtype)
    index = torch.randperm(40, generator=g)[:7]
    return dst, index, src


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("heads", "head_dim"), [(4, 16), (3, 5), (1, 3)])
def test_equals_index_copy_bit_for_bit(dtype, heads, head_dim):
    dst, index, src = _buffers(dtype, heads, head_dim)
    want = dst.clone().index_copy_(1, index, src)
    copy_token_rows(dst, index, src)
    assert torch.equal(dst.view(torch.uint8 if dtype != torch.float32 else torch.int32),
                       want.view(torch.uint8 if dtype != torch.float32 else torch.int32))  # fmt: skip


def test_words_where_the_memory_allows_and_elements_elsewhere():
    dst, index, src = _buffers(torch.bfloat16, 4, 16)
    assert _as_words(dst).shape == (2, 40, 4 * 16 * 2 // 8)
    assert _as_words(torch.empty(2, 4, 3, 5, dtype=torch.bfloat16)) is None  # 30 bytes a row
    assert _as_words(dst.transpose(2, 3)) is None  # strided
    assert _as_words(dst.flatten(2)[:, :, 1:].unflatten(2, (7, 9))) is None  # 2-byte offset
    # a strided source falls back to the element copy, with the same result
    src_t = src.transpose(2, 3).contiguous().transpose(2, 3)
    want = dst.clone().index_copy_(1, index, src_t)
    copy_token_rows(dst, index, src_t)
    assert torch.equal(dst, want)


def test_casts_the_source_to_the_buffer_dtype():
    dst, index, src = _buffers(torch.bfloat16, 2, 8)
    src32 = src.float() + 1e-3 * torch.randn(src.shape, generator=torch.Generator().manual_seed(4))
    want = dst.clone().index_copy_(1, index, src32.to(torch.bfloat16))
    copy_token_rows(dst, index, src32)
    assert torch.equal(dst, want)
