"""The handout's hand-in files, backed by the workbook's code (see the README section "Handing in the homework")."""
