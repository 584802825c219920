#!/usr/bin/python3
"""Writes the tanh RNN of issue 26 with its T steps written out (no `for`),
and a value_and_grad step over it: T-step chains of collectives, each
step's all-gather started from the done of the one before, hundreds in one
fn.  Usage: unrolled_rnn.py T"""
import sys

T = int(sys.argv[1])
print("mesh X = 2, Y = 4")
print(f"const B = 8, D = 16, T = {T}")
print("fn loss(h0: f32[B@X, D], w: f32[D, D@Y], u: f32[D, D], xs: f32[T, B, D]) -> f32[] {")
print("    h = h0")
for t in range(T):
    print("    z[b, e] = h[b, d] * w[d, e]")
    print(f"    h = tanh(z + xs[{t}])")
print("    o[b, e] = h[b, d] * u[d, e]")
print("    l[] = mean[b, e](o[b, e] * o[b, e])")
print("    return l")
print("}")
print("fn step(h0: f32[B@X, D], w: f32[D, D@Y], u: f32[D, D], xs: f32[T, B, D]) -> (f32[], f32[D, D@Y], f32[D, D]) {")
print("    l, gw, gu = value_and_grad(loss, [w, u])(h0, w, u, xs)")
print("    return l, gw, gu")
print("}")
