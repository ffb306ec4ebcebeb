"""The app's pages (scripts run by ``st.navigation``)."""
