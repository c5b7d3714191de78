"""The search tool's corpus: short notes written for this project, each with a number to find."""

from __future__ import annotations

DOCUMENTS: tuple[tuple[str, str], ...] = (
    ("Eiffel Tower", "The Eiffel Tower in Paris is 330 metres tall and was finished in 1889."),
    ("Mount Everest", "Mount Everest is 8849 metres high, the highest mountain above sea level."),
    ("Great Wall", "The Great Wall of China is about 21196 kilometres long including its branches."),
    ("Speed of light", "Light travels at 299792 kilometres per second in a vacuum."),
    ("Python language", "The Python programming language was first released in 1991 by Guido van Rossum."),
    ("Marathon", "A marathon race is 42.195 kilometres long."),
    ("Moon distance", "The Moon is on average 384400 kilometres away from the Earth."),
    ("Water boiling", "At sea level water boils at 100 degrees Celsius."),
    ("Amazon river", "The Amazon river is about 6400 kilometres long and flows into the Atlantic."),
    ("Human bones", "An adult human skeleton has 206 bones."),
    ("Olympic pool", "An Olympic swimming pool is 50 metres long."),
    ("Chess board", "A chess board has 64 squares arranged in 8 rows and 8 columns."),
    ("Lake Baikal", "Lake Baikal in Siberia is 1642 metres deep, the deepest lake on Earth."),
    ("Tokyo population", "The Tokyo metropolitan area has about 37 million inhabitants."),
    ("Sahara", "The Sahara desert covers about 9 million square kilometres."),
    ("Blue whale", "A blue whale can be 30 metres long, the largest animal known."),
    ("Piano keys", "A standard piano has 88 keys: 52 white and 36 black."),
    ("Leap year", "A leap year has 366 days; February then has 29 days."),
    (
        "Statue of Liberty",
        "The Statue of Liberty was dedicated in 1886 and stands 93 metres tall with its pedestal.",
    ),
    ("Honey bees", "A honey bee colony can hold about 60000 bees in summer."),
)
