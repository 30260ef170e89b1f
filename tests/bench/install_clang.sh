#!/bin/sh
# make bench: tinygrad's CPU backend compiles its kernels with clang. Install it from Debian's
# packages when we are root and it is missing; otherwise say how. Never fails: without clang the
# benchmark still runs and its tinygrad column says n/a.
command -v clang >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make bench: installing clang (apt-get install -y clang) for tinygrad's CPU backend" >&2
  { apt-get update -qq && apt-get install -y -qq clang >/dev/null; } ||
    echo "make bench: could not install clang; the tinygrad column will say n/a" >&2
else
  echo "make bench: clang is not on PATH; install it (sudo apt-get install clang) for the tinygrad column" >&2
fi
exit 0
