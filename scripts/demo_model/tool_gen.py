"""Random tools and requests for the demo model's synthetic tool-calling data (written for onecard).

A tool is drawn from a verb x subject grammar with typed parameters (string, integer, number,
boolean, enum, array) whose names, descriptions and value generators come from the pools below, so
training sees thousands of distinct schemas and the model has to read the schema and the request
rather than memorise a few tools. HELD_OUT tools (weather, calculator, ...) never appear in training.
"""

import random

CITIES = ["Lisbon", "Denver", "Oslo", "Cairo", "Tokyo", "Lima", "Nairobi", "Berlin", "Madrid", "Seattle", "Paris",
          "Toronto", "Sydney", "Mumbai", "Chicago", "Boston", "Dublin", "Prague", "Vienna", "Athens", "Rome", "Quito",
          "Hanoi", "Seoul", "Bogota", "Accra", "Helsinki", "Zurich", "Austin", "Phoenix", "Miami", "Warsaw", "Porto",
          "Kyoto", "Perth", "Dakar", "Tunis", "Riga", "Minsk", "Lyon", "Naples", "Geneva", "Calgary", "Houston"]
COUNTRIES = ["France", "Japan", "Brazil", "Kenya", "Canada", "Peru", "Norway", "Egypt", "India", "Spain", "Chile", "Italy"]
NAMES = ["Maria", "John", "Aiko", "Omar", "Lena", "Ravi", "Sofia", "Pedro", "Chen", "Fatima", "Lucas", "Nina", "Tom"]
WORDS = ["garden", "river", "budget", "report", "concert", "museum", "bicycle", "coffee", "piano", "holiday", "market",
         "library", "project", "invoice", "lecture", "recipe", "marathon", "meeting", "painting", "harbor", "festival"]
LANGS = ["English", "Spanish", "French", "German", "Italian", "Japanese", "Portuguese", "Dutch"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "BRL", "INR"]


def _date(r):
    return f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"


def _phrase(r):
    return " ".join(r.sample(WORDS, r.randint(1, 3)))


def _email(r):
    return f"{r.choice(NAMES).lower()}.{r.choice('abcdefghk')}@example.com"


def _code(r):
    return f"{r.choice(['ORD', 'TKT', 'INV', 'REF', 'BK'])}-{r.randint(10000, 99999)}"


def _path(r):
    return f"{r.choice(['src', 'docs', 'notes', 'data'])}/{r.choice(WORDS)}.{r.choice(['txt', 'md', 'cpp', 'csv'])}"


# name -> (description, kind, generator, how a request mentions it)
STRING_PARAMS = {
    "city": ("The city name", lambda r: r.choice(CITIES), "in {v}"),
    "location": ("City or place", lambda r: r.choice(CITIES), "for {v}"),
    "country": ("Country name", lambda r: r.choice(COUNTRIES), "in {v}"),
    "query": ("Search text", _phrase, "about {v}"),
    "topic": ("The topic", _phrase, "on the topic {v}"),
    "title": ("A short title", lambda r: _phrase(r).title(), "titled {v}"),
    "name": ("A person's name", lambda r: r.choice(NAMES), "for {v}"),
    "recipient": ("Email address of the recipient", _email, "to {v}"),
    "email": ("Email address", _email, "for {v}"),
    "date": ("Date as YYYY-MM-DD", _date, "on {v}"),
    "start_date": ("First day, YYYY-MM-DD", _date, "starting {v}"),
    "path": ("File path", _path, "at {v}"),
    "order_id": ("The order id", _code, "with id {v}"),
    "ticket_id": ("The ticket id", _code, "with id {v}"),
    "symbol": ("Ticker symbol", lambda r: r.choice(["AAPL", "MSFT", "NVDA", "TSLA", "IBM", "ORCL", "AMZN"]), "for {v}"),
    "language": ("Target language", lambda r: r.choice(LANGS), "into {v}"),
    "text": ("The text to use", lambda r: r.choice(["good morning", "thank you", "see you soon", "where is the station"]),
             "with the text {v}"),
    "currency": ("Currency code", lambda r: r.choice(CURRENCIES), "in {v}"),
    "keyword": ("A keyword", lambda r: r.choice(WORDS), "with keyword {v}"),
    "message": ("Message body", lambda r: f"The {r.choice(WORDS)} starts at {r.randint(1, 11)} pm", "saying {v}"),
    "artist": ("Artist name", lambda r: r.choice(["Miles Davis", "Nina Simone", "Bach", "Queen", "Adele"]), "by {v}"),
    "expression": ("Arithmetic expression", lambda r: f"{r.randint(2, 99)} {r.choice('+-*/')} {r.randint(2, 99)}",
                   "for {v}"),
}
INT_PARAMS = {
    "count": ("How many results", (1, 20), "{v} results"),
    "limit": ("Maximum number of items", (1, 50), "at most {v} items"),
    "days": ("Number of days", (1, 14), "for {v} days"),
    "quantity": ("Number of units", (1, 12), "{v} units"),
    "year": ("The year", (1990, 2030), "for the year {v}"),
    "guests": ("Number of guests", (1, 10), "for {v} guests"),
    "minutes": ("Duration in minutes", (1, 120), "for {v} minutes"),
    "page": ("Page number", (1, 9), "page {v}"),
    "floor": ("Floor number", (0, 30), "on floor {v}"),
}
NUM_PARAMS = {
    "amount": ("Amount of money", "amount {v}"),
    "temperature": ("Temperature in degrees", "to {v} degrees"),
    "price": ("Price limit", "under {v}"),
    "distance_km": ("Distance in kilometres", "{v} km"),
    "weight_kg": ("Weight in kilograms", "{v} kg"),
}
ENUM_PARAMS = {
    "units": ("Unit system", ["celsius", "fahrenheit"], "in {v}"),
    "unit_system": ("Units", ["metric", "imperial"], "using {v} units"),
    "priority": ("Priority", ["low", "medium", "high"], "with {v} priority"),
    "format": ("Output format", ["json", "csv", "text"], "as {v}"),
    "mode": ("Travel mode", ["driving", "walking", "cycling", "transit"], "by {v}"),
    "size": ("Size", ["small", "medium", "large"], "size {v}"),
    "sort": ("Sort order", ["newest", "oldest", "popular"], "sorted by {v}"),
    "cabin": ("Cabin class", ["economy", "business", "first"], "in {v} class"),
}
BOOL_PARAMS = {
    "urgent": ("Mark as urgent", "urgent"),
    "include_details": ("Include details", "with details"),
    "notify": ("Send a notification", "and notify me"),
    "public": ("Make it public", "publicly"),
}
ARRAY_PARAMS = {
    "values": ("List of numbers", "number", "of the numbers {v}"),
    "tags": ("List of tags", "string", "with tags {v}"),
}

VERBS = ["get", "fetch", "lookup", "find", "search", "check", "list", "create", "update", "cancel", "send", "book",
         "convert", "compute", "estimate", "track", "schedule", "translate", "play", "set", "add", "remove", "count",
         "summarize", "report", "reserve", "open", "close", "start", "stop", "rate", "compare", "analyze", "show"]
SUBJECTS = ["air_quality", "forecast_alert", "stock_quote", "exchange_rate", "order_status", "train_times", "recipe",
            "hotel", "table", "flight", "ticket", "invoice", "reminder", "alarm", "playlist", "song", "note", "file",
            "contact", "event", "meeting", "news", "traffic", "parking", "pollen_count", "tide", "sunrise", "uv_index",
            "restaurant", "movie", "book", "podcast", "package", "shipment", "expense", "budget", "workout", "steps",
            "route", "bike", "car", "taxi", "translation", "definition", "synonym", "holiday", "museum", "concert",
            "light", "thermostat", "door_lock", "camera", "timer", "task", "issue", "user", "account", "balance"]

HELD_OUT = {
    "get_weather": ("Get the current weather for a city", [("city", "s", True), ("units", "e", False)]),
    "calculate": ("Evaluate an arithmetic expression and return the result", [("expression", "s", True)]),
    "convert_currency": ("Convert an amount of money between currencies",
                         [("amount", "n", True), ("from_currency", "s", True), ("to_currency", "s", True)]),
    "get_stock_price": ("Get the latest price of a stock", [("symbol", "s", True)]),
    "set_timer": ("Start a countdown timer", [("minutes", "i", True), ("label", "s", False)]),
}


def _param_schema(name, kind):
    if kind == "s":
        desc = STRING_PARAMS.get(name, ("A value", None, None))[0]
        return {"type": "string", "description": desc}
    if kind == "i":
        return {"type": "integer", "description": INT_PARAMS[name][0]}
    if kind == "n":
        return {"type": "number", "description": NUM_PARAMS[name][0]}
    if kind == "e":
        d, vals, _ = ENUM_PARAMS[name]
        return {"type": "string", "enum": vals, "description": d}
    if kind == "b":
        return {"type": "boolean", "description": BOOL_PARAMS[name][0]}
    d, item, _ = ARRAY_PARAMS[name]
    return {"type": "array", "items": {"type": item}, "description": d}


def random_tool(r: random.Random):
    """A tool never in HELD_OUT: (name, description, [(param, kind, required)])."""
    while True:
        verb, subj = r.choice(VERBS), r.choice(SUBJECTS)
        name = f"{verb}_{subj}"
        if name not in HELD_OUT:
            break
    n = r.choice([1, 1, 2, 2, 2, 3, 3, 4])
    pools = [("s", list(STRING_PARAMS)), ("i", list(INT_PARAMS)), ("n", list(NUM_PARAMS)), ("e", list(ENUM_PARAMS)),
             ("b", list(BOOL_PARAMS)), ("a", list(ARRAY_PARAMS))]
    weights = [6, 2, 1.5, 2, 1, 0.6]
    params, used = [], set()
    while len(params) < n:
        kind, names = r.choices(pools, weights)[0]
        p = r.choice(names)
        if p in used:
            continue
        used.add(p)
        params.append((p, kind, len(params) == 0 or r.random() < 0.6))
    desc = f"{verb.capitalize()} the {subj.replace('_', ' ')}" + r.choice(["", " for the user", " and return the result",
                                                                              " using the online service"])
    return name, desc, params


def held_out_tool(name):
    desc, params = HELD_OUT[name]
    return name, desc, params


def tool_schema(tool):
    name, desc, params = tool
    props = {p: _param_schema(p, k) for p, k, _ in params}
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": [p for p, _, req in params if req]}}}


def _value(r, name, kind):
    if kind == "s":
        if name in STRING_PARAMS:
            return STRING_PARAMS[name][1](r)
        if name in ("from_currency", "to_currency"):
            return r.choice(CURRENCIES)
        return r.choice(WORDS)
    if kind == "i":
        lo, hi = INT_PARAMS[name][1]
        return r.randint(lo, hi)
    if kind == "n":
        return r.choice([r.randint(1, 500), round(r.uniform(1, 500), r.choice([1, 2]))])
    if kind == "e":
        return r.choice(ENUM_PARAMS[name][1])
    if kind == "b":
        return True
    if ARRAY_PARAMS[name][1] == "number":
        return [r.randint(1, 99) for _ in range(r.randint(2, 5))]
    return r.sample(WORDS, r.randint(2, 3))


def _mention(name, kind, v):
    if kind == "s" and name in STRING_PARAMS:
        return STRING_PARAMS[name][2].format(v=v)
    if kind == "s":
        return {"from_currency": f"from {v}", "to_currency": f"to {v}", "label": f"labelled {v}"}.get(name, f"{name} {v}")
    if kind == "i":
        return INT_PARAMS[name][2].format(v=v)
    if kind == "n":
        return NUM_PARAMS[name][1].format(v=v)
    if kind == "e":
        return ENUM_PARAMS[name][2].format(v=v)
    if kind == "b":
        return BOOL_PARAMS[name][1]
    if ARRAY_PARAMS[name][1] == "number":
        return ARRAY_PARAMS[name][2].format(v=", ".join(str(x) for x in v))
    return ARRAY_PARAMS[name][2].format(v=", ".join(v))


def make_call(r: random.Random, tool):
    """(user request text, call dict {name, arguments}) for `tool` with random values; optional
    parameters are mentioned (and passed) about half of the time."""
    name, desc, params = tool
    args, mentions = {}, []
    for p, kind, req in params:
        if req or r.random() < 0.5:
            v = _value(r, p, kind)
            args[p] = v
            mentions.append(_mention(p, kind, v))
    action = desc[0].lower() + desc[1:]
    style = r.randrange(5)
    if name == "get_weather" or (style == 0 and "weather" in name):
        text = f"What is the weather {' '.join(mentions)}?"
    elif name == "calculate":
        text = r.choice(["What is {e}?", "Calculate {e}.", "Use the calculator on {e}."]).format(e=args["expression"])
    elif style == 1:
        text = f"Please {action} {' '.join(mentions)}."
    elif style == 2:
        text = f"Can you {action} {', '.join(mentions)}?"
    elif style == 3:
        text = f"I need to {name.split('_')[0]} the {' '.join(name.split('_')[1:])} {' and '.join(mentions)}."
    else:
        text = f"{action.capitalize()} {' '.join(mentions)}, please."
    return text, {"name": name, "arguments": args}


def tool_result(r: random.Random, call):
    """A plausible JSON tool result and a one-sentence answer built from it."""
    name = call["name"]
    if name == "get_weather":
        t = r.randint(-5, 35)
        res = {"temperature": t, "conditions": r.choice(["sunny", "cloudy", "rainy", "windy"])}
        return res, f"It is {t} degrees and {res['conditions']} in {call['arguments'].get('city', 'the city')}."
    if name == "calculate":
        try:
            v = eval(call["arguments"]["expression"], {"__builtins__": {}})  # digits and + - * / only
        except ZeroDivisionError:
            v = "undefined"
        v = round(v, 4) if isinstance(v, float) else v
        return {"result": v}, f"The result is {v}."
    status = r.choice(["ok", "done", "confirmed", "found"])
    n = r.randint(1, 9)
    return {"status": status, "items": n}, r.choice([
        f"Done: the {name.replace('_', ' ')} request is {status}, with {n} items.",
        f"The service answered {status} and returned {n} results.",
        f"All set. The status is {status} ({n} items)."])
