"""What users read: the summary, the HTML report and its pages, SVG plots."""
