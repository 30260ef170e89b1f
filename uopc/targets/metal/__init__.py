"""Metal target: Metal Shading Language renderer and launcher."""
