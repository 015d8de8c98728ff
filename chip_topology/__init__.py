"""The NPU products, shared by the scheduler and the node daemons: a folder per product family
(``products``: which chips share an HCCS ring, a die, a mesh or a card, Huawei's tables, the
validation, fitting, refusal and scoring rules over bitmasks of usable chips, the chip choice a
container should get), the one registry of products and routes (``routing``), and the ring
diagram. Pure: imports nothing of ours but ``contract``."""
