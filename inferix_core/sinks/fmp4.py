"""A minimal fragmented-MP4 (ISO BMFF) writer for one H.264 track, flushed one fragment per call.

Why our own: libavformat's mov muxer keeps the current fragment in memory until the *next* keyframe
arrives and PyAV exposes no explicit flush, so after block k only blocks < k would be on disk. Writing
``moof`` + ``mdat`` ourselves puts every block on disk as soon as it is encoded. The layout is what
ffmpeg writes with ``-movflags frag_keyframe+empty_moov+default_base_moof``: ftyp, an empty moov with
mvex, then (moof, mdat) pairs. No audio, no edit lists, no B-frames (decode order = presentation order).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

_MATRIX = struct.pack(">9I", 0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000)  # identity, 16.16 / 2.30
_KEY_FLAGS = 0x02000000  # sample_depends_on = 2 (independent)
_DELTA_FLAGS = 0x01010000  # sample_depends_on = 1, sample_is_non_sync_sample = 1
_SKIPPED_NAL_TYPES = {7, 8, 9}  # SPS, PPS (they live in avcC) and access unit delimiters


def _box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    return struct.pack(">I4s", 8 + len(body), kind) + body


def _full_box(kind: bytes, version: int, flags: int, *payload: bytes) -> bytes:
    return _box(kind, struct.pack(">I", (version << 24) | flags), *payload)


def split_annexb(data: bytes) -> list[bytes]:
    """Split an Annex B byte stream (``00 00 01`` / ``00 00 00 01`` start codes) into NAL units."""
    units, start, i, n = [], -1, 0, len(data)
    while i + 2 < n:
        if data[i] == 0 and data[i + 1] == 0 and data[i + 2] == 1:
            if start >= 0:
                units.append(data[start:i].rstrip(b"\x00"))  # a 4-byte start code leaves one 00 behind
            start = i + 3
            i += 3
        else:
            i += 1
    if start >= 0:
        units.append(data[start:])
    return [u for u in units if u]


def to_length_prefixed(packet: bytes) -> bytes:
    """Annex B access unit → MP4 sample (4-byte big-endian NAL lengths), dropping in-band parameter sets."""
    nals = split_annexb(packet) if packet[:3] == b"\x00\x00\x01" or packet[:4] == b"\x00\x00\x00\x01" else [packet]
    return b"".join(struct.pack(">I", len(nal)) + nal for nal in nals if nal[0] & 0x1F not in _SKIPPED_NAL_TYPES)


def avcc_from_extradata(extradata: bytes) -> bytes:
    """Build the avcC record (ISO 14496-15 §5.3.3.1) from encoder extradata, Annex B or already avcC."""
    if extradata[:1] == b"\x01":
        return extradata
    nals = split_annexb(extradata)
    sps = [n for n in nals if n[0] & 0x1F == 7]
    pps = [n for n in nals if n[0] & 0x1F == 8]
    if not sps or not pps:
        raise ValueError("H.264 extradata has no SPS/PPS; open the encoder with the global_header flag")
    profile, compat, level = sps[0][1], sps[0][2], sps[0][3]
    record = bytes([1, profile, compat, level, 0xFF, 0xE0 | len(sps)])
    record += b"".join(struct.pack(">H", len(s)) + s for s in sps)
    record += bytes([len(pps)]) + b"".join(struct.pack(">H", len(p)) + p for p in pps)
    if profile in (100, 110, 122, 144):  # high profiles carry chroma format and bit depth: 4:2:0, 8 bit
        record += bytes([0xFC | 1, 0xF8 | 0, 0xF8 | 0, 0])
    return record


@dataclass(frozen=True)
class Sample:
    """One encoded frame: length-prefixed NAL units and whether it is a sync (IDR) sample."""

    data: bytes
    is_keyframe: bool


class FragmentedMp4Writer:
    """Writes the init segment once, then one ``moof``+``mdat`` per ``write_fragment`` call, flushed."""

    TRACK_ID = 1

    def __init__(self, file: BinaryIO, width: int, height: int, timescale: int, frame_duration: int, avcc: bytes):
        self.file = file
        self.width, self.height = width, height
        self.timescale, self.frame_duration = timescale, frame_duration
        self.avcc = avcc
        self.num_fragments = 0
        self.num_samples = 0

    def write_init(self) -> None:
        """ftyp + moov (no samples; mvex announces fragments)."""
        ftyp = _box(b"ftyp", b"isom", struct.pack(">I", 0x200), b"isomiso5iso6avc1mp41")
        mvhd = _full_box(
            b"mvhd", 0, 0, struct.pack(">IIIIIH", 0, 0, self.timescale, 0, 0x00010000, 0x0100),
            bytes(10), _MATRIX, bytes(24), struct.pack(">I", self.TRACK_ID + 1),
        )  # fmt: skip
        tkhd = _full_box(
            b"tkhd", 0, 3, struct.pack(">IIIII", 0, 0, self.TRACK_ID, 0, 0), bytes(8),
            struct.pack(">hhhH", 0, 0, 0, 0), _MATRIX, struct.pack(">II", self.width << 16, self.height << 16),
        )  # fmt: skip
        mdhd = _full_box(b"mdhd", 0, 0, struct.pack(">IIIIHH", 0, 0, self.timescale, 0, 0x55C4, 0))  # 'und'
        hdlr = _full_box(b"hdlr", 0, 0, struct.pack(">I4s", 0, b"vide"), bytes(12), b"VideoHandler\x00")
        vmhd = _full_box(b"vmhd", 0, 1, bytes(8))
        dinf = _box(b"dinf", _full_box(b"dref", 0, 0, struct.pack(">I", 1), _full_box(b"url ", 0, 1)))
        avc1 = _box(
            b"avc1", bytes(6), struct.pack(">H", 1), bytes(16), struct.pack(">HH", self.width, self.height),
            struct.pack(">III", 0x00480000, 0x00480000, 0), struct.pack(">H", 1), bytes(32),
            struct.pack(">Hh", 0x0018, -1), _box(b"avcC", self.avcc),
        )  # fmt: skip
        stbl = _box(
            b"stbl", _full_box(b"stsd", 0, 0, struct.pack(">I", 1), avc1),
            _full_box(b"stts", 0, 0, struct.pack(">I", 0)), _full_box(b"stsc", 0, 0, struct.pack(">I", 0)),
            _full_box(b"stsz", 0, 0, struct.pack(">II", 0, 0)), _full_box(b"stco", 0, 0, struct.pack(">I", 0)),
        )  # fmt: skip
        trak = _box(b"trak", tkhd, _box(b"mdia", mdhd, hdlr, _box(b"minf", vmhd, dinf, stbl)))
        mvex = _box(b"mvex", _full_box(b"trex", 0, 0, struct.pack(">IIIII", self.TRACK_ID, 1, 0, 0, 0)))
        self.file.write(ftyp + _box(b"moov", mvhd, trak, mvex))
        self.file.flush()

    def _moof(self, samples: Sequence[Sample], data_offset: int) -> bytes:
        base_time = self.num_samples * self.frame_duration
        entries = b"".join(
            struct.pack(">III", self.frame_duration, len(s.data), _KEY_FLAGS if s.is_keyframe else _DELTA_FLAGS)
            for s in samples
        )
        traf = _box(
            b"traf",
            _full_box(b"tfhd", 0, 0x020000, struct.pack(">I", self.TRACK_ID)),  # default-base-is-moof
            _full_box(b"tfdt", 1, 0, struct.pack(">Q", base_time)),
            _full_box(b"trun", 0, 0x000701, struct.pack(">Ii", len(samples), data_offset), entries),
        )  # trun flags: data-offset, sample duration, size and flags present
        return _box(b"moof", _full_box(b"mfhd", 0, 0, struct.pack(">I", self.num_fragments + 1)), traf)

    def write_fragment(self, samples: Sequence[Sample]) -> None:
        """Append one fragment holding ``samples`` and flush it to the OS, so a killed process keeps it."""
        if not samples:
            return
        moof_size = len(self._moof(samples, 0))
        moof = self._moof(samples, moof_size + 8)  # data starts after moof and the 8-byte mdat header
        self.file.write(moof + _box(b"mdat", *(s.data for s in samples)))
        self.file.flush()
        self.num_fragments += 1
        self.num_samples += len(samples)
