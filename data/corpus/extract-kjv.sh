#!/usr/bin/env bash
# Regenerates kjv-genesis-2kings.txt from Debian's bible-kjv package (the `bible` program reads the
# text shipped in bible-kjv-text). One chapter per document: a title line ("Genesis 1") followed
# by one verse per line; documents are separated by one blank line, the separator that
# `hspmd data prepare --format text` splits on. Needs: apt-get install bible-kjv.
set -euo pipefail
out="${1:-$(dirname "$0")/kjv-genesis-2kings.txt}"
bible -f "gen1:1-2ki25:30" | awk '
  BEGIN {
    split("Ge Exo Lev Num Deu Josh Jdgs Ruth 1Sm 2Sm 1Ki 2Ki", abbr, " ")
    split("Genesis|Exodus|Leviticus|Numbers|Deuteronomy|Joshua|Judges|Ruth|1 Samuel|2 Samuel|1 Kings|2 Kings", full, "|")
    for (i in abbr) name[abbr[i]] = full[i]
  }
  match($0, /^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ /) {
    ref = substr($0, 1, RLENGTH - 1); text = substr($0, RLENGTH + 1)
    match(ref, /^[0-9]?[A-Za-z]+/); book = substr(ref, 1, RLENGTH)
    rest = substr(ref, RLENGTH + 1); split(rest, cv, ":")
    key = book " " cv[1]
    if (key != last) {
      if (last != "") print ""
      print name[book] " " cv[1]
      last = key
    }
    print text
  }' > "$out"
