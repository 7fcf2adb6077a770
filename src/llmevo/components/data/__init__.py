"""Data-recipe components: which training windows an arm sees (the ``data`` slot)."""
