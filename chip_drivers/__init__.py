"""The chip drivers both node daemons read chips through: the fake driver (a YAML state file)
and Huawei's ``npu-smi``. The agent (device plugin) and the DRA driver import them from here,
so neither daemon imports the other."""
