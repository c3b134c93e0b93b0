"""Conditions in the kstatus shape (Ready, Reconciling, Stalled and our own), written only when they change."""
