"""Entry points: compare (the side-by-side table), worker (one run), vs_d2l."""
