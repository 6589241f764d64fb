"""Hand-written realistic tools for the demo model's TRAINING data (make_data.py --natural-share and
--natural-extra; written for onecard): NATURAL and NATURAL_EXTRA, in tool_gen.HELD_OUT's layout
(description, params, asks), and natural_tool, which makes one a tool as tool_gen.make_call takes it.
The value pools and generators are tool_gen's, and so is the random stream (tool_gen.Gen, which carries
the Brown words)."""

from tool_gen import (CITIES, COUNTRIES, LETTERS, NAMES, TLDS, UNITS, acronym, brown_sentence, brown_word, caps_code,
                      date_value, file_path, number_value, ref_code, short_phrase, table_tool, word)


def _airport(r):
    return r.choice(["LIS", "DEN", "OSL", "CAI", "HND", "LIM", "NBO", "BER", "MAD", "SEA", "CDG", "YYZ", "SYD", "BOM"])


def _flight(r):
    return f"{r.choice(['TP', 'LH', 'BA', 'AF', 'UA', 'DL', 'KL', 'IB'])}{r.randint(10, 9999)}"


# Realistic tools for TRAINING (make_data.py --natural-share): hand-written descriptions and natural
# request templates, as a user would phrase them, in the HELD_OUT layout. Round 6's named held-out tools
# failed on the tool choice for 23 of 100 requests while generated tools, whose requests training's
# templates cover, rarely did: training asked only in phrasings built from the tool's name. None of these
# shares a domain with a HELD_OUT tool (weather, time, timers, stocks, currencies, arithmetic, web
# search, email, translation, reminders), so the held-out set still measures unseen tools.
NATURAL = {
    "get_air_quality": ("Get the air quality index for a city", [
        ("city", "string", "City name", lambda r: r.choice(CITIES), "in {v}", True)],
        ["What is the air quality {m}?", "How clean is the air {m}?", "Tell me the air quality {m}."]),
    "get_flight_status": ("Get the status of a flight", [
        ("flight_number", "string", "Flight number", _flight, "{v}", True)],
        ["What is the status of flight {m}?", "Is flight {m} on time?", "Check flight {m} for me."]),
    "search_hotels": ("Search for hotels in a city", [
        ("city", "string", "City name", lambda r: r.choice(CITIES), "in {v}", True),
        ("guests", "integer", "Number of guests", lambda r: r.randint(1, 6), "for {v} guests", False)],
        ["Find me a hotel {m}.", "Are there hotels {m}?", "Search for hotels {m}."]),
    "book_table": ("Book a table at a restaurant", [
        ("restaurant", "string", "Restaurant name", lambda r: f"{r.choice(NAMES)}'s {brown_word(r).title()}",
         "at {v}", True),
        ("people", "integer", "Number of people", lambda r: r.randint(1, 12), "for {v} people", True)],
        ["Book a table {m}.", "Reserve a table {m}, please.", "Can you get us a table {m}?"]),
    "track_package": ("Track a package by its tracking number", [
        ("tracking_number", "string", "Tracking number", ref_code, "{v}", True)],
        ["Where is my package {m}?", "Track package {m}.", "What is the status of parcel {m}?"]),
    "get_news": ("Get the latest news headlines on a topic", [
        ("topic", "string", "News topic", short_phrase, "about {v}", True)],
        ["What is the latest news {m}?", "Show me the headlines {m}.", "Any news {m}?"]),
    "define_word": ("Look up the definition of a word", [
        ("word", "string", "The word", brown_word, "{v}", True)],
        ["What does {m} mean?", "Define the word {m}.", "Give me the meaning of {m}."]),
    "play_song": ("Play a song by title", [
        ("title", "string", "Song title", lambda r: short_phrase(r).title(), "{v}", True)],
        ["Play {m}.", "Put on the song {m}.", "I want to hear {m}."]),
    "find_recipe": ("Find a recipe that uses an ingredient", [
        ("ingredient", "string", "Main ingredient", brown_word, "with {v}", True)],
        ["Find me a recipe {m}.", "What can I cook {m}?", "Give me a recipe {m}."]),
    "get_traffic": ("Get the traffic conditions on a route", [
        ("origin", "string", "Start of the route", lambda r: r.choice(CITIES), "from {v}", True),
        ("destination", "string", "End of the route", lambda r: r.choice(CITIES), "to {v}", True)],
        ["How is the traffic {m}?", "Is there traffic {m}?", "Check the traffic {m}."]),
    "find_parking": ("Find free parking near a place", [
        ("place", "string", "Place name",
         lambda r: f"{brown_word(r).title()} {r.choice(['Square', 'Street', 'Park'])}", "near {v}", True)],
        ["Where can I park {m}?", "Find parking {m}.", "Is there free parking {m}?"]),
    "get_showtimes": ("Get the showtimes of a movie", [
        ("movie", "string", "Movie title", lambda r: short_phrase(r).title(), "{v}", True)],
        ["When is {m} playing?", "Show me the showtimes for {m}.", "What are the showtimes for {m}?"]),
    "set_thermostat": ("Set the thermostat to a temperature", [
        ("temperature", "number", "Target temperature",
         lambda r: r.choice([r.randint(15, 28), r.randint(15, 27) + 0.5]), "to {v} degrees", True)],
        ["Set the thermostat {m}.", "Make it {m} in here.", "Change the heating {m}."]),
    "turn_on_lights": ("Turn on the lights in a room", [
        ("room", "string", "Room name", lambda r: r.choice(["kitchen", "bedroom", "hall", "garage", "office", "attic"]),
         "in the {v}", True)],
        ["Turn on the lights {m}.", "Switch the lights on {m}.", "Lights on {m}, please."]),
    "add_calendar_event": ("Add an event to the calendar", [
        ("title", "string", "Event title", lambda r: short_phrase(r).capitalize(), "called {v}", True),
        ("date", "string", "Date as YYYY-MM-DD", date_value, "on {v}", True)],
        ["Add an event {m} to my calendar.", "Create a calendar event {m}.", "Schedule an event {m}."]),
    "read_file": ("Read the contents of a file", [
        ("path", "string", "File path", file_path, "{v}", True)],
        ["Show me what is in {m}.", "Read the file {m}.", "Open {m} and show it."]),
    "get_order_status": ("Get the status of an order", [
        ("order_id", "string", "Order id", ref_code, "{v}", True)],
        ["Where is my order {m}?", "What is the status of order {m}?", "Check order {m}."]),
    "get_distance": ("Get the distance between two cities", [
        ("origin", "string", "First city", lambda r: r.choice(CITIES), "from {v}", True),
        ("destination", "string", "Second city", lambda r: r.choice(CITIES), "to {v}", True)],
        ["How far is it {m}?", "What is the distance {m}?", "How many kilometres {m}?"]),
    "get_population": ("Get the population of a country", [
        ("country", "string", "Country name", lambda r: r.choice(COUNTRIES), "of {v}", True)],
        ["What is the population {m}?", "How big is the population {m}?", "Tell me the population {m}."]),
    "get_tide_times": ("Get the tide times for a harbour", [
        ("harbour", "string", "Harbour name", lambda r: r.choice(CITIES), "at {v}", True)],
        ["When is high tide {m}?", "What are the tide times {m}?", "Show the tides {m}."]),
    "book_taxi": ("Book a taxi to an address", [
        ("address", "string", "Pickup address", lambda r: f"{r.randint(1, 200)} {brown_word(r).title()} Street",
         "from {v}", True)],
        ["Get me a taxi {m}.", "Book a cab {m}.", "I need a taxi {m}."]),
    "count_steps": ("Get the number of steps walked on a day", [
        ("date", "string", "Date as YYYY-MM-DD", date_value, "on {v}", True)],
        ["How many steps did I walk {m}?", "Show my step count {m}.", "What was my step count {m}?"]),
    "find_book": ("Find a book by its author", [
        ("author", "string", "Author name", lambda r: f"{r.choice(NAMES)} {brown_word(r).title()}", "by {v}", True)],
        ["Find books {m}.", "What books are there {m}?", "Search for a book {m}."]),
    "get_uv_index": ("Get the UV index for a city", [
        ("city", "string", "City name", lambda r: r.choice(CITIES), "in {v}", True)],
        ["What is the UV index {m}?", "How strong is the sun {m}?", "Tell me the UV level {m}."]),
    "cancel_booking": ("Cancel a booking by its reference", [
        ("reference", "string", "Booking reference", ref_code, "{v}", True)],
        ["Cancel booking {m}.", "Please cancel my reservation {m}.", "I want to cancel {m}."]),
    "get_flight_price": ("Get the cheapest flight price between airports", [
        ("from_airport", "string", "Departure airport code", _airport, "from {v}", True),
        ("to_airport", "string", "Arrival airport code", _airport, "to {v}", True)],
        ["How much is a flight {m}?", "Find the cheapest flight {m}.", "What does it cost to fly {m}?"]),
    "check_balance": ("Check the balance of a bank account", [
        ("account", "string", "Account name", lambda r: r.choice(["checking", "savings", "joint", "travel"]),
         "of my {v} account", True)],
        ["What is the balance {m}?", "Tell me the balance {m}.", "Check the balance {m}."]),
    "rate_movie": ("Rate a movie from 1 to 5", [
        ("movie", "string", "Movie title", lambda r: short_phrase(r).title(), "{v}", True),
        ("stars", "integer", "Rating from 1 to 5", lambda r: r.randint(1, 5), "{v} stars", True)],
        ["Rate {m}.", "Give {m}.", "I want to rate {m}."]),
}


def _ip(r):
    return ".".join(str(r.randint(1, 254)) for _ in range(4))


def _postcode(r):
    a, b, n = r.choice(LETTERS), r.choice(LETTERS), r.randint(1, 29)
    m, c, d = r.randint(1, 9), r.choice(LETTERS), r.choice(LETTERS)
    return f"{a}{b}{n} {m}{c}{d}"


def _team(r):
    return f"{r.choice(CITIES)} {r.choice(['Rovers', 'United', 'Lions', 'Hawks', 'Rangers', 'Tigers'])}"


# More realistic tools for TRAINING (make_data.py --natural-extra), as NATURAL: 28 hand-written tools are
# few to learn from what a request means which tool, so round 7's named held-out tools still called a wrong
# tool 19 times in 100. These widen the domains and the phrasings: requests that start with another verb
# than the name's or with none ("Volume to 7, please"), a main value said alone, values hard to copy
# (HARD_VALUES' forms). Some names begin with the held-out names' verbs (convert_measurement, send_gift_card,
# set_volume: make_data.py --name-verbs' reason) but none shares a domain with a HELD_OUT tool, nor a name
# with a tool of `onecard validate`'s fixtures (tools/onecard/data/tool_fixtures.json; tested).
NATURAL_EXTRA = {
    "convert_measurement": ("Convert a quantity from one unit to another", [
        ("value", "number", "The quantity", number_value, "{v}", True),
        ("from_unit", "string", "Unit to convert from", lambda r: r.choice(UNITS), "{v}", True),
        ("to_unit", "string", "Unit to convert to", lambda r: r.choice(UNITS), "to {v}", True)],
        ["Convert {m}.", "How much is {m}?", "Change {m}, please.", "What is {m}?"]),
    "set_volume": ("Set the speaker volume", [
        ("level", "integer", "Volume level from 0 to 10", lambda r: r.randint(0, 10), "to {v}", True)],
        ["Set the volume {m}.", "Turn the volume {m}.", "Volume {m}, please.", "Change the sound level {m}."]),
    "send_gift_card": ("Send a gift card to a person", [
        ("recipient", "string", "Who gets the card", lambda r: r.choice(NAMES), "to {v}", True),
        ("amount", "number", "Value of the card", number_value, "worth {v}", True)],
        ["Send a gift card {m}.", "Give a gift card {m}.", "I want to gift a card {m}."]),
    "get_bus_times": ("Get the next departures from a bus stop", [
        ("stop_code", "string", "Bus stop code", lambda r: r.choice([caps_code, acronym])(r), "{v}", True)],
        ["When is the next bus at stop {m}?", "Bus times for stop {m}.", "Show departures from stop {m}."]),
    "lookup_ip": ("Find where an IP address is located", [
        ("address", "string", "IPv4 address", _ip, "{v}", True)],
        ["Where is {m}?", "Look up the IP {m}.", "Which country is {m} in?"]),
    "get_score": ("Get the latest score of a sports team", [
        ("team", "string", "Team name", _team, "{v}", True)],
        ["How did {m} do?", "What was the score of {m}?", "Did {m} win?"]),
    "check_spelling": ("Check the spelling of a sentence", [
        ("text", "string", "The sentence", brown_sentence, "{v}", True)],
        ["Check the spelling of {m}.", "Is this spelt right: {m}", "Proofread {m}."]),
    "summarize_text": ("Summarise a piece of text", [
        ("text", "string", "The text", brown_sentence, "{v}", True),
        ("sentences", "integer", "How many sentences", lambda r: r.randint(1, 5), "in {v} sentences", False)],
        ["Summarise {m}.", "Give me the gist of {m}.", "Shorten {m}."]),
    "get_lyrics": ("Get the lyrics of a song", [
        ("song", "string", "Song title", lambda r: short_phrase(r).title(), "{v}", True),
        ("artist", "string", "Singer or band", lambda r: f"{r.choice(NAMES)} {brown_word(r).title()}", "by {v}",
         False)],
        ["Show me the lyrics of {m}.", "What are the words to {m}?", "Find the lyrics for {m}."]),
    "order_pizza": ("Order a pizza for delivery", [
        ("topping", "string", "Main topping", brown_word, "with {v}", True),
        ("size", "enum", "Pizza size", ["small", "medium", "large"], "in size {v}", True)],
        ["Order a pizza {m}.", "I want a pizza {m}.", "Get me a pizza {m}."]),
    "find_synonym": ("Find words with the same meaning", [
        ("word", "string", "The word", brown_word, "{v}", True)],
        ["What is another word for {m}?", "Give me a synonym of {m}.", "Which words mean {m}?"]),
    "get_pollen_count": ("Get today's pollen count for a city", [
        ("city", "string", "City name", lambda r: r.choice(CITIES), "in {v}", True)],
        ["Is the pollen bad {m}?", "What is the pollen count {m}?", "How much pollen is there {m}?"]),
    "get_earthquakes": ("List recent earthquakes in a country", [
        ("country", "string", "Country name", lambda r: r.choice(COUNTRIES), "in {v}", True),
        ("min_magnitude", "number", "Smallest magnitude", lambda r: round(r.uniform(2, 7), 1), "above {v}", False)],
        ["Were there earthquakes {m}?", "List the earthquakes {m}.", "Any quakes {m}?"]),
    "get_tax_rate": ("Get the sales tax rate of a country", [
        ("country", "string", "Country name", lambda r: r.choice(COUNTRIES), "in {v}", True)],
        ["What is the sales tax {m}?", "How high is the tax rate {m}?", "Tell me the VAT {m}."]),
    "lookup_postcode": ("Find the street and town of a postcode", [
        ("postcode", "string", "The postcode", _postcode, "{v}", True)],
        ["Where is postcode {m}?", "Look up {m}.", "Which town has the postcode {m}?"]),
    "get_airport_info": ("Get information about an airport", [
        ("code", "string", "Three-letter airport code", _airport, "{v}", True)],
        ["Tell me about airport {m}.", "What airport is {m}?", "Where is {m} airport?"]),
    "count_words": ("Count the words in a text", [
        ("text", "string", "The text", brown_sentence, "in {v}", True)],
        ["How many words are {m}?", "Count the words {m}.", "Word count {m}, please."]),
    "call_contact": ("Start a phone call to a contact", [
        ("name", "string", "Contact name", lambda r: r.choice(NAMES), "{v}", True)],
        ["Call {m}.", "Phone {m}, please.", "Ring {m} for me."]),
    "open_app": ("Open an app on the phone", [
        ("app", "string", "App name", lambda r: brown_word(r).title() + r.choice(["", "", " Pro", " Plus"]), "{v}",
         True)],
        ["Open {m}.", "Launch {m}.", "Start the app {m}."]),
    "get_fuel_price": ("Get the average fuel price in a city", [
        ("city", "string", "City name", lambda r: r.choice(CITIES), "in {v}", True),
        ("fuel", "enum", "Fuel type", ["petrol", "diesel", "electric"], "for {v}", False)],
        ["How much is fuel {m}?", "What does petrol cost {m}?", "Fuel prices {m}, please."]),
    "check_domain": ("Check whether an internet domain name is free to register", [
        ("domain", "string", "Domain name", lambda r: f"{word(r)}.{r.choice(TLDS)}", "{v}", True)],
        ["Is {m} available?", "Can I still register {m}?", "Check the domain {m}."]),
    "share_location": ("Share my location with a contact", [
        ("contact", "string", "Contact name", lambda r: r.choice(NAMES), "with {v}", True),
        ("hours", "integer", "For how many hours", lambda r: r.randint(1, 12), "for {v} hours", False)],
        ["Share my location {m}.", "Let {m} see where I am.", "Send my location {m}."]),
    "find_pharmacy": ("Find an open pharmacy near a place", [
        ("place", "string", "Place or city", lambda r: r.choice(CITIES), "in {v}", True)],
        ["Is there a pharmacy open {m}?", "Find a chemist {m}.", "Where can I buy medicine {m}?"]),
    "get_train_departures": ("Get the next trains between two stations", [
        ("origin", "string", "Departure station", lambda r: r.choice(CITIES), "from {v}", True),
        ("destination", "string", "Arrival station", lambda r: r.choice(CITIES), "to {v}", True)],
        ["When is the next train {m}?", "Trains {m}, please.", "Show me trains {m}."]),
    "get_word_origin": ("Get the origin of a word", [
        ("word", "string", "The word", brown_word, "{v}", True)],
        ["Where does the word {m} come from?", "What is the origin of {m}?", "Etymology of {m}, please."]),
    "log_expense": ("Record an expense in the budget", [
        ("amount", "number", "Amount spent", number_value, "{v}", True),
        ("category", "string", "Spending category", lambda r: r.choice(["food", "rent", "travel", "books", "fun"]),
         "for {v}", True)],
        ["I spent {m}.", "Log {m}.", "Add an expense of {m}."]),
}


def natural_tool(name):
    """A NATURAL (or NATURAL_EXTRA) tool as make_call takes it (asks fixed, mentions from its parameters)."""
    return table_tool(NATURAL if name in NATURAL else NATURAL_EXTRA, name)
