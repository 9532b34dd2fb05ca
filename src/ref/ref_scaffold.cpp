// SCAFFOLD: fp64 oracles go here (foundation issue).
