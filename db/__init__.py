"""SQLModel tables and database sessions shared by every package."""
