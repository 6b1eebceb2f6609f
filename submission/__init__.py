"""The handout's hand-in files: specdec.py and benchmark.py run the workbook's code, kv-cache-implementation.py
holds its own KV cache and decoder (tested equal to the workbook's); see the README section "Handing in the homework"."""
