"""Drafters: the interface, the n-gram (prompt-lookup) drafter, the draft-model drafter, which draft
model a configuration gets, and the lean int4 draft."""
