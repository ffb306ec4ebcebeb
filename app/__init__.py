"""The EPLB workbench app (``streamlit run app/main.py``).

The pages in ``app/views`` are thin: they read widgets, call the library, and draw figures
built by the pure functions of :mod:`app.figures` (testable without Streamlit).
"""
