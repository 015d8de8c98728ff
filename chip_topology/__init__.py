"""The NPU products' chip topology, shared by the scheduler and the node agent: which chips
share an HCCS ring or a card, Huawei's ring and card tables, the fitting and scoring rules
over bitmasks of usable chips, the chip choice a container should get (the preferred
allocation), and the ring diagram. Pure: imports nothing of ours but ``contract``."""
