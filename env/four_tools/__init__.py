"""The four-tool assistant's environment: calculator, weather_query, search, get_current_time."""
