"""What a run becomes for a reader: tables over runs (summary, tables), the figures, and how each method
looks in them (styles)."""
