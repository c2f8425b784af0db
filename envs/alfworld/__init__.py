"""ALFWorld on the real TextWorld/ALFWorld engine, run in worker processes."""
