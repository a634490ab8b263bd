"""Stack config models, the model catalog and their loader; nothing here creates a resource."""
