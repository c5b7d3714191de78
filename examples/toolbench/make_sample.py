"""Writes a small StableToolBench-format sample: a query file and the cache folder its server reads.

The tools, queries and recorded answers are invented for this project; the layout is
StableToolBench's (solvable_queries/test_instruction/*.json and its tool cache).

python examples/toolbench/make_sample.py [OUT_DIR]   (default: examples/toolbench)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aworld_train.env.toolbench.catalog import Api, parse_record
from aworld_train.env.toolbench.virtual import cache_file, cache_key, request_body

HERE = Path(__file__).parent


def param(name: str, default: str, kind: str = "STRING", description: str = "") -> dict:
    return {"name": name, "type": kind, "description": description, "default": default}


def api(category, tool, name, description, required=(), optional=()) -> dict:
    return {
        "category_name": category,
        "tool_name": tool,
        "api_name": name,
        "api_description": description,
        "required_parameters": list(required),
        "optional_parameters": list(optional),
        "method": "GET",
    }


WEATHER = [
    api("Weather", "Open Meteo Lite", "Current Weather", "Weather now in a city", [param("city", "Paris")]),
    api(
        "Weather",
        "Open Meteo Lite",
        "Forecast",
        "Daily forecast",
        [param("city", "Paris")],
        [param("days", "3", "NUMBER")],
    ),
]
FX = [
    api(
        "Finance",
        "FX Rates Hub",
        "Convert",
        "Convert an amount between currencies",
        [param("from", "USD"), param("to", "EUR"), param("amount", "1", "NUMBER")],
    ),
    api(
        "Finance", "FX Rates Hub", "Latest Rates", "Latest rates for a base currency", [param("base", "USD")]
    ),
]
BOOKS = [
    api("Data", "Book Finder", "Search Books", "Search books by words", [param("q", "dune")]),
    api("Data", "Book Finder", "Book Details", "Details of a book by ISBN", [param("isbn", "9780441013593")]),
]
LEAGUE = [api("Sports", "League Table", "Standings", "Current standings", [param("league", "eredivisie")])]
RECIPES = [
    api("Food", "Recipe Box", "Find Recipe", "Recipes with an ingredient", [param("ingredient", "leek")]),
    api("Food", "Recipe Box", "Nutrition", "Nutrition facts of a recipe", [param("recipe_id", "r-17")]),
]
AIRPORTS = [api("Travel", "Airport Info", "Airport by Code", "Airport by IATA code", [param("code", "AMS")])]

# (query_id, query, api_list, [(tool, api, arguments, response)])
QUERIES = [
    (
        101,
        "What is the weather in Lisbon right now?",
        WEATHER,
        [("Open Meteo Lite", "Current Weather", {"city": "Lisbon"}, {"temp_c": 19, "sky": "clear"})],
    ),
    (
        102,
        "Convert 250 USD to EUR for my trip and tell me today's EUR rates too.",
        FX,
        [
            ("FX Rates Hub", "Convert", {"from": "USD", "to": "EUR", "amount": 250}, {"result": 231.5}),
            ("FX Rates Hub", "Latest Rates", {"base": "EUR"}, {"USD": 1.08, "GBP": 0.85}),
        ],
    ),
    (
        103,
        "Find the book 'Solaris' and give me its page count.",
        BOOKS,
        [
            (
                "Book Finder",
                "Search Books",
                {"q": "Solaris"},
                [{"title": "Solaris", "isbn": "9780156027601"}],
            ),
            ("Book Finder", "Book Details", {"isbn": "9780156027601"}, {"title": "Solaris", "pages": 204}),
        ],
    ),
    (
        104,
        "Who leads the eredivisie at the moment?",
        LEAGUE,
        [("League Table", "Standings", {"league": "eredivisie"}, [{"team": "PSV", "points": 71}])],
    ),
    (
        105,
        "Give me a recipe with leek and its calories.",
        RECIPES,
        [
            ("Recipe Box", "Find Recipe", {"ingredient": "leek"}, [{"id": "r-17", "name": "Leek soup"}]),
            ("Recipe Box", "Nutrition", {"recipe_id": "r-17"}, {"kcal": 310}),
        ],
    ),
    (
        106,
        "Which city is airport code OPO in?",
        AIRPORTS,
        [("Airport Info", "Airport by Code", {"code": "OPO"}, {"city": "Porto", "country": "Portugal"})],
    ),
    (
        107,
        "Will it rain in Bergen over the next 2 days?",
        WEATHER,
        [
            (
                "Open Meteo Lite",
                "Forecast",
                {"city": "Bergen", "days": 2},
                [{"day": 1, "rain_mm": 12}, {"day": 2, "rain_mm": 4}],
            )
        ],
    ),
    (
        108,
        "What are the latest rates for GBP?",
        FX,
        [("FX Rates Hub", "Latest Rates", {"base": "GBP"}, {"USD": 1.27, "EUR": 1.17})],
    ),
]


def records() -> list[dict]:
    out = []
    for query_id, query, apis, calls in QUERIES:
        relevant = []
        for tool, name, _, _ in calls:
            if [tool, name] not in relevant:
                relevant.append([tool, name])
        out.append({"api_list": apis, "query": query, "relevant APIs": relevant, "query_id": query_id})
    return out


def write(out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    queries = out_dir / "G1_sample.json"
    queries.write_text(json.dumps(records(), indent=2) + "\n")
    cache = out_dir / "tool_cache"
    files: dict[Path, dict] = {}
    for index, record in enumerate(records()):
        task = parse_record(record, index)
        for tool, name, arguments, response in QUERIES[index][3]:
            found: Api = next(a for a in task.apis if (a.tool, a.api) == (tool, name))
            body = request_body(found, arguments, key="")
            path = cache_file(cache, body["category"], body["tool_name"], body["api_name"])
            files.setdefault(path, {})[cache_key(body["tool_input"])] = {
                "error": "",
                "response": json.dumps(response),
            }
    for path, entries in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries, indent=4) + "\n")
    return queries, cache


def scripted_calls() -> dict[str, list[tuple[str, str, dict]]]:
    """query_id -> the (tool, api, arguments) calls that answer it, for tests and demos."""
    return {str(q): [(t, a, args) for t, a, args, _ in calls] for q, _, _, calls in QUERIES}


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    print(*write(target), sep="\n")
