"""What the SSH gateway asks: keys and their proofs, who may enter which
instance, the session audit, where the gateway is reached."""
