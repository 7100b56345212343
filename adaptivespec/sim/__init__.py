"""The `sim` backend: GPU-scale speculative decoding priced by a roofline on a virtual clock."""
