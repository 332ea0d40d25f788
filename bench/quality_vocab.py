"""Words and templates of the ``bench.quality`` data set (the logic is in ``bench.quality_data``).

A *frame* is one fact worth asking about: the statements that carry it (1 to 3 dialog turns, all
of them evidence), a question phrased with the statements' own content words (``lexical``) and
one phrased with synonyms (``paraphrase``). ``{name}`` placeholders are slots: ``user`` and
``partner`` are the two people of the agent's conversation; any other name is drawn from
``POOLS`` or ``GENERATED`` (a trailing digit, ``person2``, draws another value of ``person``).
``key`` names the slot that tells this fact from a look-alike one (the same frame about another
city, band, ...): near-miss distractors change it, so it must occur in both questions.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs


@attrs.frozen
class Frame:
    statements: tuple[str, ...]
    lexical: str
    paraphrase: str
    key: str | None = None


@attrs.frozen
class Topic:
    name: str
    words: tuple[str, ...]  # what same-topic chatter talks about
    frames: tuple[Frame, ...]


@attrs.frozen
class CoreFact:
    text: str
    category: str  # factual | preference
    lexical: str | None = None
    paraphrase: str | None = None


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

FIRST_NAMES = ("Maya", "Jonas", "Priya", "Tomas", "Aisha", "Lukas", "Elena", "Marco", "Sofia", "Daniel", "Yuki",
               "Omar", "Freya", "Mateo", "Nadia", "Felix", "Ingrid", "Rafael", "Leila", "Henrik", "Chloe", "Arjun",
               "Greta", "Samuel", "Zara", "Viktor", "Amara", "Oscar", "Hana", "Bruno", "Carmen", "Elias", "Noor",
               "Pablo", "Astrid", "Kofi", "Mila", "Tariq", "Lena", "Emil")
SURNAMES = ("Patel", "Novak", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Rossi", "Kowalski", "Haddad", "Schmidt",
            "Alvarez", "Nakamura", "Osei", "Brennan", "Costa", "Petrov", "Jansen", "Larsen", "Dubois", "Mehta")
AGENT_NAMES = ("Nova", "Atlas", "Iris", "Orion", "Juniper", "Sage", "Pilot", "Quill", "Echo", "Beacon", "Lumen", "Tern")
AGENT_ROLES = ("personal assistant", "household assistant", "work assistant", "travel and errands assistant",
               "life admin assistant", "planning assistant")
JOBS = ("data engineer", "nurse", "architect", "high-school teacher", "product designer", "site reliability engineer",
        "accountant", "marine biologist", "chef", "journalist", "pharmacist", "urban planner")
EMPLOYERS = ("Northwind", "Fabrikam", "Contoso", "Globex", "Initech", "Tailspin Toys", "Litware", "Proseware",
             "Wingtip", "Adventure Works", "Blue Yonder", "Coho Winery")

POOLS: dict[str, tuple[str, ...]] = {
    "person": FIRST_NAMES,
    "surname": SURNAMES,
    "month": MONTHS,
    "weekday": WEEKDAYS,
    "city": ("Lisbon", "Oslo", "Kyoto", "Valencia", "Krakow", "Montreal", "Porto", "Tallinn", "Edinburgh", "Seville",
             "Bologna", "Ljubljana", "Cape Town", "Hanoi", "Vancouver", "Dubrovnik", "Bergen", "Salzburg",
             "Marrakesh", "Reykjavik"),
    "service": ("payments", "checkout", "search", "notifications", "billing-api", "auth", "inventory", "reporting",
                "ledger", "gateway"),
    "region": ("eu-west-1", "eu-central-1", "us-east-2", "us-west-2", "ap-southeast-1", "ca-central-1"),
    "company": ("Northwind", "Fabrikam", "Contoso", "Globex", "Initech", "Litware", "Proseware", "Wingtip",
                "Lucerne Publishing", "Margie's Travel", "Alpine Ski House", "Fourth Coffee"),
    "subscription": ("Spotify", "Netflix", "Audible", "Duolingo", "Headspace", "Strava", "Dropbox", "Peloton"),
    "hotel": ("Hotel Aurora", "Casa Verde", "The Lantern Inn", "Harbour House", "Villa Serena", "The Granary",
              "Hotel Mirador", "Kestrel Lodge"),
    "restaurant": ("Taberna do Mar", "Osteria Lupa", "Kin Khao", "El Faro", "Brasserie Nord", "Sakura Tei",
                   "The Copper Pot", "Trattoria Sole"),
    "dish": ("paella", "goulash", "moussaka", "lasagne", "biryani", "ramen", "shakshuka", "pierogi", "risotto",
             "tagine"),
    "med": ("amoxicillin", "ibuprofen", "prednisolone", "cetirizine", "omeprazole", "doxycycline"),
    "dose": ("250 mg", "400 mg", "500 mg", "10 mg", "20 mg", "100 mg"),
    "allergen": ("peanuts", "shellfish", "sesame", "kiwi", "penicillin", "cashews"),
    "spice": ("smoked paprika", "saffron", "cumin", "nutmeg", "cardamom", "sumac", "fennel seed"),
    "brand": ("Kenwood", "Bosch", "Smeg", "Breville", "Miele", "Philips", "Tefal", "Ninja"),
    "petname": ("Biscuit", "Pepper", "Miso", "Juno", "Olive", "Waffles", "Tofu", "Clementine", "Pixel", "Nacho"),
    "breed": ("beagle", "border collie", "dachshund", "greyhound", "labrador", "corgi", "whippet"),
    "piece": ("Blackbird", "Wonderwall", "Hallelujah", "Romanza", "Dust in the Wind", "Fast Car", "Vincent"),
    "band": ("Radiohead", "Fleetwood Mac", "Arctic Monkeys", "Khruangbin", "Bon Iver", "Phoenix", "Massive Attack",
             "Fontaines D.C."),
    "venue": ("Roundhouse", "Apollo", "Paradiso", "the Barbican", "Vega", "the Olympia", "Tivoli", "the Usher Hall"),
    "plant": ("lettuces", "courgettes", "strawberries", "hostas", "dahlias", "runner beans"),
    "street": ("Elm Road", "Mill Lane", "Harbour Street", "Station Road", "Church Walk", "Quarry Hill", "Orchard Way"),
    "object": ("blue flowerpot", "doormat", "garden gnome", "loose brick by the gate", "recycling bin"),
    "color": ("sage green", "terracotta", "deep navy", "warm white", "ochre", "dusty pink"),
    "appliance": ("fridge", "washing machine", "oven", "dishwasher", "extractor fan", "water heater"),
    "book": ("The Remains of the Day", "Middlemarch", "Piranesi", "The Left Hand of Darkness", "Stoner",
             "A Gentleman in Moscow", "The Overstory", "Pachinko", "Circe", "The Dispossessed"),
    "author": ("Ursula K. Le Guin", "Kazuo Ishiguro", "George Eliot", "Susanna Clarke", "Richard Powers",
               "Min Jin Lee", "Madeline Miller", "John Williams"),
    "gift": ("silk scarf", "pasta machine", "hammock", "watercolour set", "bread maker", "pair of binoculars",
             "pottery class voucher"),
    "dresscode": ("black tie", "smart casual", "garden formal", "all white", "cocktail attire"),
    "school": ("Riverside Primary", "St Anne's", "Greenfield Academy", "the Montessori on Park Road",
               "Hillcrest Elementary"),
    "project": ("Falcon", "Bluebird", "Horizon", "Atlas", "Mercury", "Cobalt", "Juniper", "Keystone"),
    "cert": ("AWS Solutions Architect", "PMP", "CKA Kubernetes", "CFA level one", "Scrum Master", "CISSP"),
    "language": ("Spanish", "Japanese", "Italian", "Portuguese", "Korean", "Dutch", "Mandarin"),
    "skill": ("machine learning", "watercolour painting", "public speaking", "bookkeeping", "UX research",
              "film photography"),
    "gadget": ("e-reader", "drone", "standing desk", "robot vacuum", "mechanical keyboard", "smartwatch"),
    "item": ("rain jacket", "hiking boots", "wool coat", "running shoes", "linen shirt", "winter gloves"),
    "password": ("maple-otter-42", "blue-harbour-17", "quiet-fox-88", "lemon-tree-09", "north-wind-63"),
    "tz": ("Europe/Lisbon", "Europe/Berlin", "America/Toronto", "Asia/Tokyo", "Africa/Cape_Town", "Europe/Oslo"),
    "channel": ("email", "text message", "a calendar invite", "a Slack message"),
    "nickname": ("Mo", "Jojo", "Pip", "Sunny", "Bea", "Teddy", "Lou", "Kit"),
    "diet": ("vegetarian", "pescatarian", "vegan", "gluten-free", "dairy-free"),
}


def _money(rng: random.Random) -> str:
    return f"${rng.randint(12, 2400):,}"


GENERATED: dict[str, Callable[[random.Random], str]] = {
    "date": lambda r: f"{r.randint(1, 28)} {r.choice(MONTHS)}",
    "time": lambda r: f"{r.randint(7, 19)}:{r.choice(('00', '15', '30', '45'))}",
    "amount": _money,
    "num": lambda r: str(r.randint(3, 48)),
    "seat": lambda r: f"{r.randint(3, 38)}{r.choice('ACDF')}",
    "ticket": lambda r: f"{r.choice(('INC', 'OPS', 'CS', 'REQ'))}-{r.randint(1000, 9999)}",
    "version": lambda r: f"{r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)}",
    "duration": lambda r: f"1:{r.randint(38, 59)}:{r.randint(10, 59)}",
    "code": lambda r: f"{r.choice(('RAL', 'NCS', 'BS'))} {r.randint(1000, 9999)}-{r.randint(10, 99)}",
}

TOPICS: tuple[Topic, ...] = (
    Topic("infrastructure", ("database", "deploy", "server", "alerts", "outage", "cluster", "runbook", "pager",
                             "migration", "latency", "release", "monitoring"), (
        Frame(("We moved the {service} database to {region} last week, and {person} owns the failover runbook now.",),
              "Which region was the {service} database moved to?",
              "Where does the {service} datastore live after the migration?", "service"),
        Frame(("The {service} deploy on {weekday} broke login for {num} minutes.",
               "We rolled back to version {version} and the login errors stopped."),
              "Which version did the {service} deploy roll back to?",
              "After the {service} release went wrong, what build did we revert to?", "service"),
        Frame(("I opened ticket {ticket} about the flaky {service} alerts.",
               "Update on {ticket}: {person} traced the flaky {service} alerts to a full disk on the cache node."),
              "What caused the flaky {service} alerts in ticket {ticket}?",
              "Why did {service} keep paging us?", "service"),
        Frame(("The on-call rotation changes on {date}: {person} takes the pager for two weeks.",),
              "Who takes the on-call pager when the rotation changes?",
              "Who is responsible for emergencies after the schedule switch?"),
    )),
    Topic("money", ("invoice", "bank", "budget", "payment", "tax", "receipt", "subscription", "refund", "savings",
                    "bill", "account", "expenses"), (
        Frame(("The {company} invoice for {amount} arrived today.",
               "I set a reminder, that invoice is due on {date}."),
              "When is the {company} invoice due?", "By what day must we pay {company}?", "company"),
        Frame(("I cancelled the {subscription} subscription, it was costing {amount} a month.",),
              "How much was the {subscription} subscription costing per month?",
              "What did I pay monthly for {subscription} before I stopped it?", "subscription"),
        Frame(("Our accountant {person} says the tax return is due on {date}.",
               "{person} also wants the receipts for the home office, around {amount} in total."),
              "When is the tax return due, and which receipts does the accountant want?",
              "What deadline did {person} give for filing, and what paperwork is missing?"),
        Frame(("I got a refund of {amount} from {company} after the double charge.",),
              "How much was the refund from {company} for the double charge?",
              "What did {company} pay back after billing me twice?", "company"),
    )),
    Topic("travel", ("flight", "hotel", "trip", "passport", "airport", "luggage", "booking", "train", "beach",
                     "itinerary", "visa", "holiday"), (
        Frame(("I booked the flight to {city} for {date}, window seat {seat}.",
               "For {city} we are staying at {hotel}, it is close to the old town.",
               "The {hotel} booking includes breakfast and check-in is from {time}."),
              "When is the flight to {city}, which hotel are we staying at and when is check-in?",
              "What day do I fly out to {city}, where will we sleep, and when can we get the room?", "city"),
        Frame(("My passport expires on {date}, I need to renew it before the next trip.",),
              "When does {user}'s passport expire?", "What is the expiry date on my travel document?"),
        Frame(("{partner} recommended {restaurant} in {city}, we should try the {dish} there.",),
              "Which restaurant in {city} did {partner} recommend?",
              "Where did {partner} suggest we eat when we visit {city}?", "city"),
        Frame(("The car rental in {city} is with {company}, pickup at the airport.",
               "Confirmation {ticket} for the rental: the desk opens at {time}, do not be late."),
              "What time is the car rental pickup in {city}?",
              "When can we collect the hire car on arrival in {city}?", "city"),
    )),
    Topic("health", ("doctor", "appointment", "pain", "sleep", "pharmacy", "prescription", "clinic", "symptoms",
                     "checkup", "headache", "dentist", "allergy"), (
        Frame(("My dentist appointment with Dr. {surname} is on {date}.",
               "Dr. {surname}'s office called, they moved me to {time} in the afternoon."),
              "When is {user}'s dentist appointment?", "When do I have to get my teeth looked at?"),
        Frame(("The doctor put me on {med}, {dose} twice a day for ten days.",),
              "What dose of {med} did the doctor prescribe?",
              "How much of the {med} am I supposed to take each time?", "med"),
        Frame(("I have had knee pain since the charity run in {month}.",
               "The physio {person} said the knee needs {num} days of rest and no running."),
              "What did the physio say about the knee pain and running?",
              "How long must I avoid jogging because of my injured leg?"),
        Frame(("I am allergic to {allergen}, found out the hard way at {person}'s wedding.",),
              "What is {user} allergic to?", "Which food gives me a bad reaction?"),
    )),
    Topic("fitness", ("gym", "workout", "running", "training", "marathon", "swimming", "weights", "stretching",
                      "cardio", "coach", "yoga", "cycling"), (
        Frame(("I signed up for the {city} half marathon on {date}, goal time {duration}.",),
              "What is the goal time for the {city} half marathon?",
              "How fast do I want to finish the race in {city}?", "city"),
        Frame(("New gym routine: squats and deadlifts on {weekday}, swimming {num} laps on weekends.",),
              "How many laps of swimming are in the weekend gym routine?",
              "How far do I swim on Saturdays and Sundays?"),
        Frame(("My personal best on the bench press is {num} kilos, set in {month}.",),
              "What is {user}'s personal best on the bench press?",
              "What is the heaviest I have ever lifted lying down?"),
        Frame(("The yoga class with {person} moved to {weekday} evenings.",
               "{person} texted that from next week it starts at {time} instead."),
              "When is the yoga class with {person} now?",
              "What is the new slot for {person}'s stretching session?", "person"),
    )),
    Topic("cooking", ("recipe", "dinner", "kitchen", "oven", "baking", "groceries", "sauce", "bread", "vegetables",
                      "cookbook", "spices", "lunch"), (
        Frame(("My grandmother's {dish} recipe needs a lot of garlic and a pinch of {spice}.",),
              "What spice goes in the grandmother's {dish} recipe?",
              "Which seasoning does nana add to her {dish}?", "dish"),
        Frame(("We are hosting dinner on {date} for {num} people.",
               "{person} is vegetarian, so I will make the {dish} without meat."),
              "Who is vegetarian at the dinner we are hosting?", "Which guest does not eat meat at our party?"),
        Frame(("I finally bought a {brand} stand mixer, it was {amount} on sale.",),
              "How much did the {brand} stand mixer cost?", "What price did I pay for the {brand} kitchen machine?",
              "brand"),
        Frame(("The sourdough starter needs feeding every {num} hours, I named it {petname}.",),
              "How often does the sourdough starter need feeding?",
              "How frequently must I feed the bread culture?"),
    )),
    Topic("music", ("guitar", "concert", "song", "band", "album", "lessons", "piano", "choir", "practice", "tickets",
                    "playlist", "gig"), (
        Frame(("I am learning {piece} on the guitar, {person} gives me lessons on {weekday}.",),
              "Which song is {user} learning on the guitar?", "What tune am I practising on my six-string?"),
        Frame(("Got tickets for {band} at {venue} on {date}, row {seat}.",),
              "When is the {band} concert at {venue}?", "What night do we see {band} live?", "band"),
        Frame(("I joined a choir that rehearses at {venue} every {weekday}.",
               "The choir concert is on {date}, I am nervous already.",
               "We are singing {piece} at the concert and I have a short solo!"),
              "When is the choir concert and what are we singing?",
              "What date do we perform with the singing group, and which piece?"),
        Frame(("I sold my old keyboard to {person} for {amount}.",),
              "How much did {user} sell the old keyboard for?", "What did {person} pay me for the instrument?"),
    )),
    Topic("garden", ("garden", "plants", "seeds", "soil", "compost", "weeds", "watering", "greenhouse", "flowers",
                     "hedge", "lawn", "pots"), (
        Frame(("I planted {num} tomato plants along the south fence on {date}.",),
              "How many tomato plants did {user} plant?", "How many tomatoes did I put in the bed by the fence?"),
        Frame(("The apple tree needs pruning in {month}, {person} lent me the long shears.",),
              "When does the apple tree need pruning?", "Which month should I cut back the fruit tree?"),
        Frame(("Slugs ate the {plant} again, so I am trying copper tape around the beds.",),
              "What is {user} trying against the slugs eating the {plant}?",
              "How am I protecting my {plant} from pests?", "plant"),
        Frame(("We got an allotment on {street}, finally!",
               "Our plot is number {num}, right next to the shed."),
              "What is the allotment plot number?", "Which plot is ours in the community garden?"),
    )),
    Topic("pets", ("dog", "cat", "vet", "walk", "leash", "treats", "kennel", "puppy", "grooming", "litter", "fur",
                   "toys"), (
        Frame(("Our {breed} {petname} is due for the rabies shot on {date}.",
               "Booked the vet for {petname}'s jab, {time} with Dr. {surname}."),
              "When is {petname} due for the rabies shot?", "When does {petname} need the next vaccine?", "petname"),
        Frame(("The vet, Dr. {surname}, said the dog should lose {num} kilos.",),
              "How many kilos should the dog lose according to the vet?",
              "How much weight does the animal doctor want our pup to drop?"),
        Frame(("{person} will feed the cat while we are away, the spare key is under the {object}.",),
              "Where is the spare key for the person feeding the cat?",
              "Where did we hide the extra house key for the pet sitter?"),
        Frame(("The cat only eats the {brand} salmon food, the chicken one makes her sick.",),
              "Which food does the cat eat?", "What brand of kibble does our kitty tolerate?"),
    )),
    Topic("home", ("flat", "landlord", "repairs", "plumber", "paint", "furniture", "boiler", "rent", "cleaning",
                   "neighbours", "wifi", "kitchen"), (
        Frame(("The plumber {person} is coming on {date} to fix the leaking boiler.",
               "{person} quoted {amount} for the new boiler valve."),
              "When is the plumber coming and what did they quote for the boiler?",
              "How much will the heating repair cost, and when is the visit?"),
        Frame(("We painted the living room {color}, the paint code is {code}.",),
              "What is the paint code for the living room?", "Which colour reference did we use on the lounge walls?"),
        Frame(("The landlord {person} agreed to replace the {appliance} by {date}.",),
              "When will the landlord replace the {appliance}?", "By when is {person} swapping the broken {appliance}?",
              "appliance"),
        Frame(("Our wifi password is {password}, the router is in the hallway cupboard.",),
              "What is the wifi password?", "What is the code for the wireless network?"),
    )),
    Topic("car", ("car", "garage", "tyres", "parking", "fuel", "insurance", "mechanic", "engine", "traffic",
                  "service", "battery", "road"), (
        Frame(("The car's MOT is due on {date}.",
               "The garage on {street} can fit the test in the week before."),
              "When is the car's MOT due?", "When does the vehicle inspection expire?"),
        Frame(("I got a parking fine of {amount} on {street}, the appeal deadline is {date}.",),
              "What is the appeal deadline for the parking fine on {street}?",
              "Until when can I contest the ticket I got on {street}?", "street"),
        Frame(("The tyres were replaced at {num} thousand miles with {brand} all-seasons.",),
              "Which brand of tyres were fitted?", "What make are the new wheels on the car?"),
        Frame(("{person} is borrowing the car on {weekday} to move flats.",),
              "Who is borrowing the car on {weekday}?", "Which friend needs our vehicle for the move?"),
    )),
    Topic("books", ("book", "novel", "reading", "library", "author", "chapter", "bookshop", "poetry", "kindle",
                    "series", "review", "club"), (
        Frame(("Book club picked {book} by {author} for {month}.",),
              "Which book did the book club pick for {month}?",
              "What are we reading in the reading group in {month}?", "month"),
        Frame(("I lent my copy of {book} to {person}, still waiting for it back.",),
              "Who borrowed {user}'s copy of {book}?", "Who has my {book} paperback?", "book"),
        Frame(("My favourite author is {author}, I reread {book} every winter.",),
              "Who is {user}'s favourite author?", "Which writer do I like most?"),
        Frame(("The library fine for the overdue {book} is {amount}.",),
              "How much is the library fine for the overdue book?", "What do I owe for returning the novel late?"),
    )),
    Topic("family", ("mum", "dad", "sister", "brother", "birthday", "wedding", "kids", "cousins", "grandparents",
                     "party", "visit", "reunion"), (
        Frame(("Mum's birthday is on {date}, we should do something nice.",
               "I think she would love a {gift}, she keeps mentioning it."),
              "When is Mum's birthday and what does she want?", "What present would my mother like, and when?"),
        Frame(("{person}'s wedding is in {city} on {date}.",
               "For {person}'s wedding the dress code is {dresscode} and we are bringing a {gift}."),
              "What is the dress code at {person}'s wedding in {city}?",
              "What should we wear when {person} gets married?", "person"),
        Frame(("My nephew {person} starts school on {date} at {school}.",),
              "Which school does the nephew start at?", "Where will my sister's boy go to class?"),
        Frame(("The family reunion is at {venue} in {month}, and {person} is organising it.",),
              "Who is organising the family reunion?", "Who is planning the big get-together with the relatives?"),
    )),
    Topic("work", ("meeting", "manager", "project", "deadline", "team", "office", "presentation", "client",
                   "review", "promotion", "slides", "colleague"), (
        Frame(("My performance review is on {date} with {person}.",
               "I am going to ask {person} for a raise to {amount}, wish me luck."),
              "When is {user}'s performance review and what raise will they ask for?",
              "When do I meet my boss about my evaluation, and how much more pay do I want?"),
        Frame(("The {project} project deadline slipped to {date} because the vendor was late.",),
              "What is the new deadline for the {project} project?", "When is {project} now supposed to ship?",
              "project"),
        Frame(("I am presenting the {project} roadmap at the all-hands on {weekday}, slides due to {person}.",),
              "Who are the slides for the {project} roadmap due to?",
              "Who needs my deck for the {project} presentation?", "project"),
        Frame(("I passed the {cert} certification with {num} percent.",),
              "What score did {user} get on the {cert} certification?", "How did I do on the {cert} exam?", "cert"),
    )),
    Topic("learning", ("course", "class", "homework", "exam", "teacher", "lecture", "studying", "notes", "grades",
                       "tutor", "university", "thesis"), (
        Frame(("I enrolled in the evening {language} course at {school}, it starts on {date}.",),
              "When does the evening {language} course start?", "When do my {language} lessons begin?", "language"),
        Frame(("My thesis supervisor {person} wants the draft chapter by {date}.",),
              "When does the thesis supervisor want the draft chapter?",
              "When is my dissertation section due to {person}?"),
        Frame(("The online course on {skill} costs {amount} and has {num} modules.",),
              "How many modules does the online course on {skill} have?",
              "How long is the {skill} class I am taking on the internet?", "skill"),
        Frame(("Exam results come out on {date}.",
               "I need {num} points to pass, fingers crossed."),
              "When do the exam results come out and how many points does {user} need to pass?",
              "What is the pass mark for my test, and when do I find out?"),
    )),
    Topic("shopping", ("order", "delivery", "store", "discount", "parcel", "sale", "shop", "return", "warranty",
                       "laptop", "phone", "basket"), (
        Frame(("I ordered a {gadget} from {company}, tracking number {ticket}.",
               "The courier says the parcel arrives on {weekday} before noon."),
              "When is the {gadget} from {company} arriving?", "What day will my new {gadget} be delivered?",
              "gadget"),
        Frame(("The laptop warranty runs until {date}, the receipt is in my email from {company}.",),
              "When does the laptop warranty run until?", "Until when is my notebook covered for repairs?"),
        Frame(("I returned the {item} because it was too small, the refund takes {num} days.",),
              "How long does the refund for the returned {item} take?",
              "When will I get my money back for the {item}?", "item"),
        Frame(("My phone plan with {company} is {amount} a month with {num} GB of data.",),
              "How much data is in {user}'s phone plan?", "How many gigabytes do I get on my mobile contract?"),
    )),
)

CORE_FACTS: tuple[CoreFact, ...] = (
    CoreFact("{user} {surname} works as a {job} at {employer}.", "factual",
             "What does {user} work as?", "Where is {user} employed?"),
    CoreFact("{user} lives in {home} with {partner}.", "factual",
             "Who does {user} live with?", "Who shares a home with {user}?"),
    CoreFact("{user} prefers to be called {nickname}.", "preference",
             "What does {user} prefer to be called?", "What nickname should I use for {user}?"),
    CoreFact("{user} is {diet} and does not want meat suggestions.", "preference",
             "What diet does {user} follow?", "What does {user} eat?"),
    CoreFact("{user} wants reminders by {channel}, never by phone call.", "preference",
             "How does {user} want reminders?", "How should I nudge {user} about things?"),
    CoreFact("The assistant is {agent}, {user}'s {role}.", "factual"),
    CoreFact("{user} prefers short answers with bullet points.", "preference"),
    CoreFact("{user}'s timezone is {tz}, avoid scheduling anything before 9am.", "preference"),
    CoreFact("{user}'s favourite colour is {color}.", "preference"),
    CoreFact("{user} speaks {language} and English.", "factual"),
)

CHATTER: tuple[str, ...] = (
    "I was thinking about the {w1} again, still have not decided anything.",
    "Did you ever sort out the {w1}? I keep meaning to ask about the {w2} too.",
    "The {w1} is such a rabbit hole, I read about {w2} for an hour last night.",
    "No news on the {w1} yet, maybe next week.",
    "I love talking about {w1} with you, even if we never agree on the {w2}.",
    "Ugh, the {w1} again. Can we talk about something else?",
    "My colleague spent the whole lunch talking about her {w1}.",
    "Remind me to look at the {w1} and the {w2} this weekend.",
    "I saw a video about {w1} and thought of you.",
    "Honestly the {w1} stuff can wait until after the holidays.",
    "What do you think about the {w1}? I am not sure about the {w2} either.",
    "I need a proper plan for the {w1}, winging it is not working.",
    "Funny, I was just reading an article about {w1} this morning.",
    "The {w1} went fine in the end, nothing special to report.",
    "We should make a list for the {w1} and the {w2} so nothing slips.",
    "Not much new with the {w1}, same as always really.",
    "Is it weird that I find the {w1} kind of relaxing?",
    "I asked around about the {w1} but nobody really knew.",
    "Maybe we ask someone who knows more about {w2}.",
    "The whole {w1} thing reminded me how much I procrastinate.",
    "I keep postponing the {w2}, it is becoming a running joke.",
    "Let us not stress about the {w1}, it will sort itself out.",
)

FILLER: tuple[str, ...] = (
    "Good morning! Did you sleep well?",
    "Haha, that is hilarious.",
    "I am so tired today, it has been a long week.",
    "Talk later, I have to run.",
    "The weather has been strange lately, sunny one minute and pouring the next.",
    "Did you watch the match last night?",
    "I made way too much coffee again.",
    "Thanks for listening, it really helps.",
    "That sounds lovely, I am a bit jealous.",
    "Oh no, I hope it gets better soon.",
    "We should catch up properly over the weekend.",
    "I finally cleaned out my inbox, it feels amazing.",
    "My neighbour's kid is learning the trumpet. Pray for me.",
    "Sorry for the late reply, my phone died.",
    "That is a good point, I had not thought about it that way.",
    "I am making soup tonight, nothing fancy.",
    "Do you ever feel like the weeks just blur together?",
    "I walked past that new bakery again and resisted. Barely.",
    "Happy Friday! Any plans?",
    "Same here, honestly.",
    "The train was late again this morning.",
    "I started a new podcast about space, it is very soothing.",
    "You always know how to cheer me up.",
    "Let me check and get back to you.",
    "I cannot believe it is already this late in the year.",
    "My plants are judging me, I forgot to water them.",
    "Ha, classic.",
    "I had the weirdest dream about a giant octopus.",
    "We need to plan a proper day off soon.",
    "Yes! Exactly what I was thinking.",
    "I just burnt the toast, off to a great start.",
    "The sunset was gorgeous tonight.",
    "Not sure, we will see how the week goes.",
    "Ok, sounds good to me.",
    "I tried that breathing exercise you mentioned, it works.",
    "Traffic was awful on the way home.",
    "I am watching a documentary about bees, fascinating stuff.",
    "I think I am coming down with a cold.",
    "Wow, good for you!",
    "Let us do that next time.",
)

FILLER_TAILS: tuple[str, ...] = (
    "Anyway, how are you?", "Long story.", "Not a big deal.", "We will see.", "Such is life.", "Typical.",
    "Fingers crossed.", "I will tell you more later.", "Oh well.", "Anyway.", "More soon.", "Ha.",
)

PADDING: tuple[str, ...] = (
    "It has been a hectic few days with everything going on.",
    "I keep meaning to write these things down somewhere sensible.",
    "Sorry if I am rambling, my head is all over the place today.",
    "Anyway, that was the main thing I wanted to tell you.",
    "I spent most of the afternoon answering messages and getting nowhere.",
    "It is funny how small things take up the most time.",
    "I told myself I would be more organised this month, we will see how that goes.",
    "The neighbours were having a party so I barely slept.",
    "I had a long call with my brother earlier about nothing in particular.",
    "Honestly I just needed to get that off my chest.",
    "The cafe downstairs changed its menu and I am not happy about it.",
    "I am trying to keep the evenings free for once.",
    "There is so much going on at the moment that I lose track.",
    "I will probably forget half of this by tomorrow, so I am telling you now.",
    "On the bright side, the weekend is almost here.",
    "I finally finished that series we talked about, the ending was strange.",
    "My sister says hello, by the way.",
    "I also need to call the bank at some point, but that can wait.",
    "The light in the kitchen keeps flickering, which is driving me mad.",
    "It rained the whole day so I stayed in and read.",
)

# Word swaps for paraphrased duplicates (either direction; only whole lower-case words).
SYNONYMS: dict[str, str] = {
    "really": "truly", "maybe": "perhaps", "think": "reckon", "also": "too", "big": "large", "got": "received",
    "finally": "at last", "again": "once more", "need": "have", "still": "yet", "about": "regarding",
    "keep": "continue", "just": "only", "lovely": "nice", "awful": "terrible", "long": "lengthy",
    "amazing": "great", "ask": "inquire", "new": "fresh", "later": "afterwards", "spent": "used",
}
DISCOURSE = ("Honestly, ", "So, ", "By the way, ", "Oh, and ", "Just so you know, ")
