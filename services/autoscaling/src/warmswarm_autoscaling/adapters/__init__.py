"""Adapters: the ports implemented with real libraries (aiodocker, aiobotocore, redis); only main.py wires them."""
