// SCAFFOLD: parity harness goes here (foundation issue).
