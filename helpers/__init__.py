"""Tested code behind the workbook's notebooks: the notebooks narrate, these modules compute."""
