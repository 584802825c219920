# Paste the signature `shardc autoshard` chose (file `sig`: its `record` and
# `fn` lines) into a program: each source line that declares the same
# record or fn is replaced by the chosen one (a fn header keeps its `{`).
# Usage: awk -f paste.awk SIG PROG
function key(line) { split(line, w, /[ (]/); return w[1] " " w[2] }
NR == FNR { if ($0 ~ /^(record|fn) /) chosen[key($0)] = $0; next }
/^(record|fn) / && (key($0) in chosen) { print chosen[key($0)] ($1 == "fn" ? " {" : ""); next }
{ print }
