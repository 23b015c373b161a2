"""Multiple choice (SWAG / ARC / COPA style): a context and N candidate endings, pick one."""
