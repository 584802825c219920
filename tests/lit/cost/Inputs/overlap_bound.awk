# Reads dump --cost output; for every fn's summary checks that the predicted
# time (with overlap) is at most compute + memory + comm (without), and at
# least compute + memory (the compute stream never waits less than zero).
# Prints "ok N" with the count of summaries, or the offending lines.
function secs(s,    v) {
    sub(/[,;]$/, "", s)
    v = s + 0
    if (s ~ /ns$/) return v * 1e-9
    if (s ~ /us$/) return v * 1e-6
    if (s ~ /ms$/) return v * 1e-3
    return v
}
/^# predicted time of / { t = secs($NF); name = $5; next }
/^#   compute / {
    c = secs($3); m = secs($5); k = secs($7)
    n++
    if (t > (c + m + k) * (1 + 1e-3) + 1e-12 || t < (c + m) * (1 - 1e-3)) {
        print "bad: " name " time " t " compute " c " memory " m " comm " k
        bad++
    }
}
END { if (!bad) print "ok " n " summaries" }
