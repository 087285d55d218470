#!/usr/bin/env bash
# Set up the two real ComfyUI versions that tests/integration runs against, each with its own venv, and a
# Chromium for the browser tests (docs/comfyui_integration.md, "Get ComfyUI" and "Make ComfyUI's Pythons").
#
#   scripts/setup_real_comfyui.sh [--mirror-0.3.64 GIT_DIR] [--mirror-0.27 GIT_DIR] [--prefix DIR]
#
# Each tree is made from a git mirror (a bare repository or a .git directory) given with --mirror-*, by
# exporting the pinned commit's files one blob at a time (a partial mirror may lack large blobs: those are
# reported and skipped; the tests need none of them), or else by `git clone` from GitHub. Nothing of
# ComfyUI is copied into this repository. Idempotent: a tree whose .inferix_commit names the pinned
# commit, a venv whose marker file exists and an installed Chromium are kept as they are.
#
# Then, per version:
#   COMFYUI_DIR=$PREFIX/comfyui-0.27 COMFYUI_PYTHON=$PREFIX/comfyui-venv-0.27/bin/python \
#       python -m pytest tests/integration -v -rs
set -euo pipefail

PREFIX=/work
MIRROR_0364=""
MIRROR_027=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mirror-0.3.64) MIRROR_0364=$2; shift 2 ;;
    --mirror-0.27) MIRROR_027=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

COMMIT_0364=a125cd84b054a57729b5eecab930ca9408719832  # Comfy-Org/ComfyUI v0.3.64
COMMIT_027=77917ed3a6291689e5c2ee8ccbdd6708e85a53a6   # 1696762169/ComfyUI v0.27.0 (V3 API)
TORCH="torch==2.14.1 torchvision==0.29.1"

export_tree() {  # export_tree GIT_DIR DEST COMMIT: the commit's files, blob by blob
  local git_dir=$1 dest=$2 rev=$3 missing=0
  mkdir -p "$dest"
  while IFS=$'\t' read -r meta path; do
    read -r _mode type sha <<< "$meta"
    [ "$type" = blob ] || continue
    mkdir -p "$dest/$(dirname "$path")"
    if ! git --git-dir="$git_dir" cat-file blob "$sha" > "$dest/$path" 2>/dev/null; then
      rm -f "$dest/$path"; echo "  missing from the mirror (skipped): $path"; missing=$((missing + 1))
    fi
  done < <(git --git-dir="$git_dir" ls-tree -r "$rev")
  echo "  $missing file(s) missing"
}

get_tree() {  # get_tree DEST COMMIT MIRROR URL
  local dest=$1 rev=$2 mirror=$3 url=$4
  if [ -f "$dest/.inferix_commit" ] && [ "$(cat "$dest/.inferix_commit")" = "$rev" ]; then
    echo "== $dest: already at $rev"; return
  fi
  echo "== $dest: ComfyUI at $rev"
  rm -rf "$dest"
  if [ -n "$mirror" ]; then
    git --git-dir="$mirror" cat-file -e "$rev^{commit}" || { echo "$mirror has no commit $rev" >&2; exit 1; }
    export_tree "$mirror" "$dest" "$rev"
  else
    git clone --quiet "$url" "$dest" && git -C "$dest" checkout --quiet "$rev"
  fi
  echo "$rev" > "$dest/.inferix_commit"
}

mkvenv() {  # mkvenv VENV TREE [extra pip args...]: torch pinned, the tree's requirements less torch*
  local venv=$1 tree=$2; shift 2
  if [ -f "$venv/.inferix_ready" ] && cmp -s "$tree/requirements.txt" "$venv/.inferix_ready"; then
    echo "== $venv: ready"; return
  fi
  echo "== $venv: for $tree"
  [ -x "$venv/bin/python" ] || python3.11 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $TORCH
  local reqs
  reqs=$(mktemp)
  grep -vE '^(torch|torchvision|torchaudio)([<>=!~ ].*)?$' "$tree/requirements.txt" > "$reqs"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q -r "$reqs" requests websocket-client $TORCH
  rm -f "$reqs"
  for extra in "$@"; do "$venv/bin/pip" install -q --no-deps "$extra"; done
  cp "$tree/requirements.txt" "$venv/.inferix_ready"
}

get_tree "$PREFIX/comfyui-0.3.64" "$COMMIT_0364" "$MIRROR_0364" https://github.com/Comfy-Org/ComfyUI
get_tree "$PREFIX/comfyui-0.27" "$COMMIT_027" "$MIRROR_027" https://github.com/1696762169/ComfyUI
mkvenv "$PREFIX/comfyui-venv-0.3.64" "$PREFIX/comfyui-0.3.64"
# v0.27 imports torchaudio at start-up; 2.11.1 without its deps keeps torch 2.14.1 and works for that
mkvenv "$PREFIX/comfyui-venv-0.27" "$PREFIX/comfyui-0.27" torchaudio==2.11.1

if ! command -v chromium > /dev/null && ! command -v chromium-browser > /dev/null \
   && ! command -v google-chrome > /dev/null && [ -z "${INFERIX_CHROMIUM:-}" ]; then
  echo "== Chromium (Debian package)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium > /dev/null
fi

cat <<EOF
== done. Run the integration tests once per version (from the repository root):
COMFYUI_DIR=$PREFIX/comfyui-0.3.64 COMFYUI_PYTHON=$PREFIX/comfyui-venv-0.3.64/bin/python python -m pytest tests/integration -v -rs
COMFYUI_DIR=$PREFIX/comfyui-0.27 COMFYUI_PYTHON=$PREFIX/comfyui-venv-0.27/bin/python python -m pytest tests/integration -v -rs
EOF
