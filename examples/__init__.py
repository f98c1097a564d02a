"""Small runnable apps behind queuegate; tests/test_examples.py drives each."""
