"""Pure HTTP protocol pieces (sans-I/O): no I/O, no imports from other ustun layers."""
