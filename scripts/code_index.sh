#!/usr/bin/env bash
# code_index.sh - the code-search indexes of a LongStraw tree, with LS_K(name) expanded:
#   tags        universal-ctags (the options of .ctags.d/longstraw.ctags): a definition written
#               `void LS_K(ls_x)(...)` is found as ls_x_f64 (a function), ls_x and ls_x_f32 (kind k)
#   cscope.out  cscope over cscope.files (every C source and header), built from a copy of the
#               sources in which each macro of the configuration's -D lines is expanded (LS_K(ls_x)
#               becomes ls_x_f64, on the same line), so definitions, callers and callees resolve by
#               the name the linker sees; the copy (.code-index/) is removed afterwards
#
#   scripts/code_index.sh [ROOT]    (default: the repository this script lies in)
#
# Then: `readtags -t ROOT/tags ls_attn_block_forward`, `cscope -d -L -1 ls_attn_block_forward_f64`
# (run at ROOT), or an editor's tag jump.  Without .ctags.d/longstraw.ctags the indexes are built
# unexpanded (and say so): the LS_K definitions are then found by neither name
# (tests/tools/code_search.sh checks both).  Exit 2: no such root, or ctags/cscope missing.
set -euo pipefail
ROOT=${1:-$(dirname "$0")/..}
[ -d "$ROOT" ] || { echo "code_index: $ROOT: no such directory" >&2; exit 2; }
ROOT=$(cd "$ROOT" && pwd)
for tool in ctags cscope; do
  command -v "$tool" >/dev/null || { echo "code_index: $tool not found (Debian: universal-ctags, cscope; scripts/setup.sh installs them)" >&2; exit 2; }
done
cd "$ROOT"
CONF=.ctags.d/longstraw.ctags
if [ ! -f "$CONF" ]; then
  echo "code_index: $ROOT/$CONF missing: LS_K(name) definitions are indexed unexpanded (found by neither name)" >&2
fi

# the C sources: outside build trees, fuzz corpora and test data
find . \( -name '.git' -o -name '.code-index' -o -name 'build*' -o -path './tests/fuzz/corpus' \
          -o -path './tests/fixtures' -o -path './tests/data' -o -name '__pycache__' \) -prune -o \
       -type f \( -name '*.c' -o -name '*.h' \) -print | LC_ALL=C sort > cscope.files
[ -s cscope.files ] || { echo "code_index: $ROOT: no C sources" >&2; exit 2; }

# tags: ctags reads ./.ctags.d/*.ctags itself (run here, at the root)
ctags -R -o tags .

# cscope has no preprocessor: each one-argument macro of the form -DNAME(p)=p##SUFFIX in the
# configuration becomes a sed expression over a copy of the sources (line for line, so the
# database's line numbers are the real files').
sed_expr=()
if [ -f "$CONF" ]; then
  while IFS= read -r line; do
    if [[ $line =~ ^-D([A-Za-z_][A-Za-z0-9_]*)\(([A-Za-z_][A-Za-z0-9_]*)\)=([A-Za-z_][A-Za-z0-9_]*)##([A-Za-z0-9_]+)$ ]] &&
       [ "${BASH_REMATCH[2]}" = "${BASH_REMATCH[3]}" ]; then
      sed_expr+=(-e "s/\\b${BASH_REMATCH[1]}(\\([A-Za-z_][A-Za-z0-9_]*\\))/\\1${BASH_REMATCH[4]}/g")
    fi
  done < "$CONF"
fi
rm -rf .code-index
mkdir -p .code-index/src
while IFS= read -r f; do
  mkdir -p ".code-index/src/$(dirname "$f")"
  if [ ${#sed_expr[@]} -gt 0 ]; then sed "${sed_expr[@]}" "$f" > ".code-index/src/$f"; else cp "$f" ".code-index/src/$f"; fi
done < cscope.files
rm -f cscope.out cscope.out.in cscope.out.po
(cd .code-index/src && cscope -b -q -k -i "$ROOT/cscope.files" -f "$ROOT/cscope.out")
rm -rf .code-index
echo "code_index: $ROOT/tags ($(grep -vc '^!' tags) tags), $ROOT/cscope.out ($(wc -l < cscope.files) files)" >&2
