#!/usr/bin/python3
"""Writes a loss that reads each of the N layers of a stacked weight by a
constant index, written out (no `for`), and its gradient: the N slices'
cotangents tile w's, one concatenate of N pieces.  Usage: many_slices.py N"""
import sys

N = int(sys.argv[1])
print("mesh X = 2, Y = 4")
print(f"const B = 8, D = 16, N = {N}")
print("fn loss(x: f32[B@X, D], w: f32[N, D, D@Y]) -> f32[] {")
print("    h = x")
for i in range(N):
    print(f"    h[b, e] = h[b, d] * w[{i}, d, e]")
print("    l[] = mean[b, e](h[b, e] * h[b, e])")
print("    return l")
print("}")
print("fn step(x: f32[B@X, D], w: f32[N, D, D@Y]) -> (f32[], f32[N, D, D@Y]) {")
print("    l, gw = value_and_grad(loss, [w])(x, w)")
print("    return l, gw")
print("}")
