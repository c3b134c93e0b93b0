"""Pure functions from a DFlashDeployment (and resolved cache facts) to the objects it should own. No I/O."""
