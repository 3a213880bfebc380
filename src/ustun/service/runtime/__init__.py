"""What runs beside the routes: the worker, its loops, the secret key."""
