"""Sessions: long library procedures that drive runners, precision plans and judges together (the
precision search), so a step only maps its params to one and writes what it returns."""
