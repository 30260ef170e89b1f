"""`uopc tune` and the tuning database (issue 20): BEAM search over Optimize's OptOps, and builds that reuse it.

Modules:
- kernels: a program's kernels after Rangeify (before Optimize), each with its database key;
- db: the tuning database (JSON, sorted and stable), its located errors, merging;
- apply: `uopc build --tuning`: the database's opts as a `--opts` schedule, with a report;
- space: the search space (the OptOps tried from a kernel's current opts) and its version;
- compile: one candidate (a kernel with pinned opts) built alone into a library, in worker processes;
- measure: running a candidate library on a device (the CPU through ctypes, CUDA through the driver API);
- search: the BEAM search per kernel and the run over a program, within budgets;
- progress: a progress bar on a TTY (tqdm when installed), plain lines otherwise.

Invariant: a build with `--tuning DB` is the build with the database's opts pinned by `--opts`, so
its outputs are byte for byte those of the tuning machine's build with those opts.
"""
