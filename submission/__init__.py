"""The handout's hand-in files: specdec.py holds speculative decoding written out in ``decode()`` (tested equal to the
workbook's), benchmark.py times it against plain decoding, kv-cache-implementation.py holds its own KV cache and
decoder (tested equal to the workbook's); prompts.jsonl and long_prompt.txt are stand-ins for the course's files. See
the README section "Handing in the homework"."""
