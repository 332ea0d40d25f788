"""auth edge package."""
