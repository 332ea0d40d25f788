"""http_api edge package."""
