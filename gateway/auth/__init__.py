"""Tokens (tokens: signing, verifying, principals) and their revocation across replicas (revocations)."""
