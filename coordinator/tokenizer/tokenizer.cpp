// Placeholder replaced by the tokenizer implementation.
