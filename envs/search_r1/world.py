"""The shipped corpus and questions: a small fictional archipelago, written for agentenvs.

The Serran Isles do not exist, so a model cannot answer from memory and every answer
is unambiguous. The world is generated from a fixed seed: facts are drawn first
(islands, towns, people, rivers, mountains, ships, books, lighthouses), then written
up as encyclopedia-style passages in Search-R1's corpus layout, and questions are
asked about those facts, some needing two searches (the founder of a town, then the
founder's birth year). Each question carries what the scripted oracle needs: the
query for each hop and the text that hop's passage must show.

Regenerate the shipped files with ``python -m agentenvs.envs.search_r1.world DIR``;
a test checks the shipped files equal this module's output.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEED = 20250311

ISLANDS = [
    ("Marrowen", "the largest island, ringed by chalk cliffs", "sheep farming and wool"),
    ("Tessaly", "a long, low island of salt marshes", "salt panning"),
    ("Ondrel", "a volcanic island with black sand beaches", "sulphur mining"),
    ("Kavesh", "a forested island in the north", "timber and shipbuilding"),
    ("Brightholm", "a windswept island of moors and standing stones", "peat cutting"),
    ("Sulmara", "a warm southern island of terraced hills", "citrus orchards"),
    ("Ferrick", "a rocky island rich in iron ore", "iron smelting"),
    ("Ilvane", "a small island of orchards and quiet harbours", "cider pressing"),
]

MAINLAND = ["Cassar", "Durn Vale", "Hollis Cross", "Old Amberley", "Senn", "Vastergard"]

TOWN_NAMES = [
    "Port Avelin",
    "Greywater",
    "Hesketh",
    "Carrow Bay",
    "Lindqvist Harbour",
    "Saltmere",
    "Ebbing",
    "Fennick",
    "Marlow Sands",
    "Quillon",
    "Ashcombe",
    "Dunraith",
    "Black Strand",
    "Emberlee",
    "Kettering Point",
    "Oakhollow",
    "Tamsin's Landing",
    "Rookfell",
    "Brannock",
    "Velling",
    "Stonewick",
    "Harrowgate Moor",
    "Cairnley",
    "Whistlecombe",
    "Peverell",
    "Solenne",
    "Terracina Minor",
    "Almsbury",
    "Cedric's Quay",
    "Orlaith",
    "Ironhaven",
    "Forgewell",
    "Culvercombe",
    "Rustmere",
    "Anvil Head",
    "Pippin Cove",
    "Mellowdale",
    "Westerholt",
    "Brindle",
    "Cask End",
]

FIRST_NAMES = [
    "Oren",
    "Maelis",
    "Tobiah",
    "Ysolde",
    "Caspian",
    "Wenna",
    "Florian",
    "Ilsabet",
    "Dorran",
    "Perrin",
    "Liesl",
    "Anselm",
    "Rhoswen",
    "Gideon",
    "Tamsin",
    "Eamon",
    "Odile",
    "Corwin",
    "Brisa",
    "Lucan",
    "Mirela",
    "Aldous",
    "Nerys",
    "Benedek",
    "Saoirse",
    "Hollis",
    "Ottilie",
    "Jarrow",
    "Ciaran",
    "Elspeth",
    "Thaddeus",
    "Vesna",
    "Rufus",
    "Isaura",
    "Linnea",
    "Malachy",
    "Sabeth",
    "Idris",
    "Ferelith",
    "Quentin",
]

SURNAMES = [
    "Falk",
    "Varrow",
    "Quenby",
    "Halloran",
    "Treadwell",
    "Ostrander",
    "Mirabeau",
    "Kettle",
    "Penhallow",
    "Drummond",
    "Ashgrove",
    "Vellacott",
    "Brackwater",
    "Lanyon",
    "Sorensby",
    "Thistlewood",
    "Carrick",
    "Ambrose",
    "Vintner",
    "Holloway",
    "Marchbank",
    "Fairweather",
    "Tregarth",
    "Oakshott",
    "Wrexley",
    "Pemberton",
    "Galbraith",
    "Redfern",
    "Stanhope",
    "Quarrington",
    "Blackwood",
    "Elsworth",
    "Farrant",
    "Merriweather",
    "Nettleship",
    "Ormsby",
    "Pendry",
    "Ravensworth",
    "Sallow",
    "Tolliver",
    "Underhill",
    "Wakeling",
    "Yarrowby",
    "Ackroyd",
    "Beaumaris",
    "Colquhoun",
    "Dunstable",
    "Everard",
    "Fitzalan",
    "Greaves",
    "Hartnell",
    "Inglewood",
    "Jessop",
    "Kingsmill",
    "Lockridge",
    "Mottram",
    "Northcote",
    "Oldcastle",
    "Prideaux",
    "Rushworth",
    "Swinburne",
    "Thorncroft",
    "Upcott",
    "Vosper",
    "Whitlock",
    "Ashdown",
    "Brereton",
    "Cheverell",
    "Daventry",
    "Entwistle",
    "Fennimore",
    "Gascoyne",
    "Harcourt",
    "Ironside",
    "Kilbride",
    "Lowther",
    "Moberly",
    "Nancarrow",
    "Orchardson",
    "Pollexfen",
    "Raddings",
    "Sedgwick",
    "Tremayne",
    "Abernethy",
    "Bellingham",
    "Cardew",
    "Delacourt",
    "Ellingworth",
    "Frobisher",
    "Gilchrist",
    "Hawtrey",
    "Jolliffe",
    "Kenward",
    "Lisburne",
    "Mountjoy",
    "Nuttall",
    "Ollerenshaw",
    "Pettigrew",
    "Rainsford",
    "Scudamore",
    "Tichborne",
    "Wardlaw",
]

RIVER_NAMES = [
    "Sella",
    "Wendle",
    "Arrow",
    "Caddis",
    "Mirrin",
    "Tolvey",
    "Ousel",
    "Brenna",
    "Kestle",
    "Larrow",
    "Fennel",
    "Dray",
    "Quell",
    "Hythe",
    "Skerrow",
    "Amblin",
]
MOUNTAIN_NAMES = [
    "Mount Corran",
    "Mount Veyle",
    "Hessick Peak",
    "Mount Ardle",
    "Grey Tor",
    "Mount Solway",
    "Thornback Fell",
    "Mount Ivel",
    "Caldera Rise",
    "Mount Pellow",
]
WATERS = [
    "the Serran Sea",
    "the Sound of Tessaly",
    "Gullhaven Bay",
    "the Northern Reach",
    "the Strait of Ondrel",
    "Amber Bay",
]
SHIP_NAMES = [
    "Morning Lark",
    "Saltwind",
    "Persephone's Oar",
    "Ironheart",
    "Glass Heron",
    "Wayward Son",
    "Calliope",
    "North Star of Kavesh",
    "Brightwater",
    "Gannet",
    "Queen of Sulmara",
    "Tidecaller",
    "Old Faithful",
    "Silver Mackerel",
    "Harbinger",
]
BOOK_TITLES = [
    "The Chart of Winds",
    "A Grammar of the Isles",
    "Songs from the Salt Marsh",
    "On the Breeding of Sheep",
    "The Iron Ledger",
    "Letters to a Young Shipwright",
    "A Natural History of Ondrel",
    "The Orchard Year",
    "Tides and Their Causes",
    "The Lantern Keeper's Daughter",
    "Stone Circles of Brightholm",
    "A Treatise on Bridges",
    "The Drowned Bell",
    "Mapping the Northern Reach",
    "Hymns for Harvest",
    "The Cartographer's Apprentice",
    "Ledger of the Salt Guild",
    "Seven Winters on Kavesh",
]
LIGHTHOUSES = [
    "Gull Rock Light",
    "Ferrow Head Light",
    "Saint Ebba's Light",
    "Cinder Point Light",
    "Long Spit Light",
    "Whitestone Light",
    "Mallory Light",
    "Outer Skerry Light",
]
OCCUPATIONS = [
    "cartographer",
    "poet",
    "naturalist",
    "shipwright",
    "engineer",
    "composer",
    "astronomer",
    "physician",
    "merchant",
    "painter",
    "mountaineer",
    "historian",
]
TRADES = [
    "fishing",
    "wool weaving",
    "boatbuilding",
    "salt trading",
    "cider making",
    "lace making",
    "rope making",
    "pottery",
    "ironwork",
    "herring curing",
]
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
]  # fmt: skip


@dataclass
class Person:
    name: str
    born: int
    died: int
    birthplace: str
    occupation: str
    mentor: str | None = None
    known_for: list[str] = field(default_factory=list)

    @property
    def surname(self) -> str:
        return self.name.split()[-1]


@dataclass
class Town:
    name: str
    island: str
    founded: int
    founder: str
    river: str
    trade: str
    festival_month: str
    population: int


@dataclass
class World:
    islands: dict[str, tuple[str, str]]
    towns: dict[str, Town]
    people: dict[str, Person]
    rivers: dict[str, dict[str, Any]]
    mountains: dict[str, dict[str, Any]]
    ships: dict[str, dict[str, Any]]
    books: dict[str, dict[str, Any]]
    lighthouses: dict[str, dict[str, Any]]


def _pick(rng: random.Random, options: list[str]) -> str:
    return options[rng.randrange(len(options))]


def build_world(seed: int = SEED) -> World:
    rng = random.Random(seed)
    islands = {name: (desc, industry) for name, desc, industry in ISLANDS}
    island_names = list(islands)
    names = [f"{f} {s}" for f, s in zip(FIRST_NAMES * 3, SURNAMES, strict=False)]
    rng.shuffle(names)
    people: dict[str, Person] = {}

    towns: dict[str, Town] = {}
    rivers: dict[str, dict[str, Any]] = {}
    river_pool = list(RIVER_NAMES)
    rng.shuffle(river_pool)
    # Each island gets two rivers; each town lies on one of its island's rivers.
    for i, island in enumerate(island_names):
        for river in river_pool[2 * i : 2 * i + 2]:
            rivers[river] = {
                "island": island,
                "length_km": rng.randint(9, 84),
                "mouth": _pick(rng, WATERS),
                "towns": [],
            }
    founding_years = sorted(rng.sample(range(1105, 1520), len(TOWN_NAMES)))
    town_order = list(TOWN_NAMES)
    rng.shuffle(town_order)
    for i, (town_name, founded) in enumerate(zip(town_order, founding_years, strict=True)):
        island = island_names[TOWN_NAMES.index(town_name) // 5]
        island_rivers = [r for r, info in rivers.items() if info["island"] == island]
        river = island_rivers[rng.randrange(2)]
        founder_name = names.pop()
        born = founded - rng.randint(28, 46)
        earlier = [t for t in towns.values() if t.founded < born]
        birthplace = (
            _pick(rng, [t.name for t in earlier]) if earlier and i % 3 else _pick(rng, MAINLAND)
        )
        people[founder_name] = Person(
            founder_name, born, born + rng.randint(55, 84), birthplace, "settler",
            known_for=[f"founding {town_name}"],
        )  # fmt: skip
        towns[town_name] = Town(
            town_name, island, founded, founder_name, river, _pick(rng, TRADES),
            _pick(rng, MONTHS), rng.randrange(800, 42000, 10),
        )  # fmt: skip
        rivers[river]["towns"].append(town_name)

    # Later islanders: makers of ships, books, maps, lighthouses.
    later: list[Person] = []
    for name in names:
        born = rng.randint(1560, 1840)
        birthplace = _pick(rng, [t.name for t in towns.values() if t.founded < born - 5])
        occupation = _pick(rng, OCCUPATIONS)
        person = Person(name, born, born + rng.randint(41, 89), birthplace, occupation)
        people[name] = person
        later.append(person)
    later.sort(key=lambda p: p.born)
    for i, person in enumerate(later):
        elders = [p for p in later[:i] if 15 <= person.born - p.born <= 45]
        if elders and rng.random() < 0.8:
            person.mentor = _pick(rng, [p.name for p in elders])

    def maker(occupations: tuple[str, ...], used: set[str]) -> Person:
        pool = [p for p in later if p.occupation in occupations and p.name not in used]
        if not pool:
            pool = [p for p in later if p.name not in used]
        chosen = pool[rng.randrange(len(pool))]
        used.add(chosen.name)
        return chosen

    used: set[str] = set()
    ships: dict[str, dict[str, Any]] = {}
    for ship in SHIP_NAMES:
        wright = maker(("shipwright", "engineer", "merchant"), used)
        wright.occupation = "shipwright"
        launched = wright.born + rng.randint(26, 40)
        port = _pick(rng, [t.name for t in towns.values() if t.founded < launched])
        ships[ship] = {
            "builder": wright.name,
            "launched": launched,
            "port": port,
            "tons": rng.randrange(90, 900, 5),
            "kind": _pick(rng, ["brig", "schooner", "cutter", "barque", "ketch"]),
        }
        wright.known_for.append(f"building the {ship}")
    books: dict[str, dict[str, Any]] = {}
    for title in BOOK_TITLES:
        author = maker(("poet", "naturalist", "historian", "cartographer", "physician"), used)
        books[title] = {
            "author": author.name,
            "published": author.born + rng.randint(24, 38),
            "subject": _pick(rng, island_names),
        }
        author.known_for.append(f"writing {title}")
    mountains: dict[str, dict[str, Any]] = {}
    for mountain in MOUNTAIN_NAMES:
        climber = maker(("mountaineer", "naturalist", "astronomer"), used)
        climber.occupation = "mountaineer"
        mountains[mountain] = {
            "island": _pick(rng, island_names),
            "height_m": rng.randint(610, 2890),
            "first_ascent_by": climber.name,
            "first_ascent": climber.born + rng.randint(19, 33),
        }
        climber.known_for.append(f"the first ascent of {mountain}")
    lighthouses: dict[str, dict[str, Any]] = {}
    for light in LIGHTHOUSES:
        engineer = maker(("engineer", "astronomer", "painter", "composer"), used)
        engineer.occupation = "engineer"
        built = engineer.born + rng.randint(28, 45)
        lighthouses[light] = {
            "designer": engineer.name,
            "built": built,
            "town": _pick(rng, [t.name for t in towns.values() if t.founded < built]),
            "height_m": rng.randint(14, 48),
        }
        engineer.known_for.append(f"designing {light}")
    return World(islands, towns, people, rivers, mountains, ships, books, lighthouses)


# ---- passages ---------------------------------------------------------------------------


def _passage(pid: int, title: str, text: str) -> dict[str, str]:
    return {"id": str(pid), "contents": f'"{title}"\n{text}'}


def write_passages(world: World, seed: int = SEED) -> list[dict[str, str]]:
    rng = random.Random(seed + 1)
    out: list[dict[str, str]] = []

    def add(title: str, text: str) -> None:
        out.append(_passage(len(out), title, " ".join(text.split())))

    add(
        "Serran Isles",
        "The Serran Isles are an archipelago of eight inhabited islands in the Serran Sea: "
        + ", ".join(world.islands)
        + ". The islands were settled from the mainland in the twelfth century. "
        "Each island keeps its own council, and the councils meet once a year at Port Avelin.",
    )
    for island, (desc, industry) in world.islands.items():
        towns = [t.name for t in world.towns.values() if t.island == island]
        rivers = [r for r, info in world.rivers.items() if info["island"] == island]
        add(
            f"{island} (island)",
            f"{island} is {desc} in the Serran Isles. Its chief industry is {industry}. "
            f"The towns of {island} are {', '.join(towns[:-1])} and {towns[-1]}. "
            f"The rivers {rivers[0]} and {rivers[1]} drain the island.",
        )
    for city in MAINLAND:
        add(
            city,
            f"{city} is a city on the mainland across the Serran Sea. Many of the first "
            f"settlers of the Serran Isles sailed from {city}, and its merchants still trade "
            f"with the islands.",
        )
    for town in world.towns.values():
        variants = [
            f"{town.name} is a town on the island of {town.island} in the Serran Isles. It was "
            f"founded in {town.founded} by {town.founder}. The town lies on the River "
            f"{town.river}.",
            f"{town.name} is a settlement on {town.island}, one of the Serran Isles, standing on "
            f"the banks of the River {town.river}. {town.founder} founded it in {town.founded}.",
        ]
        add(
            town.name,
            variants[rng.randrange(2)]
            + f" It had a population of {town.population:,} at the last island census. Its "
            f"people are known for {town.trade}, and the town holds its harvest fair every "
            f"{town.festival_month}.",
        )
    for river, info in world.rivers.items():
        towns = info["towns"]
        through = (
            f"It flows past {', '.join(towns[:-1])} and {towns[-1]}"
            if len(towns) > 1
            else f"It flows past {towns[0]}"
            if towns
            else "No town stands on its banks"
        )
        add(
            f"River {river}",
            f"The River {river} is a river on the island of {info['island']}, "
            f"{info['length_km']} kilometres long. {through}, and it empties into "
            f"{info['mouth']}.",
        )
    for name, person in sorted(world.people.items(), key=lambda kv: kv[1].born):
        early = (
            f"{name} ({person.born}–{person.died}) was a {person.occupation} of the Serran "
            f"Isles. {name} was born in {person.born} in {person.birthplace}."
        )
        if person.mentor:
            early += (
                f" As a young {person.occupation}, {person.surname} studied under {person.mentor}."
            )
        add(name, early)
        if person.known_for:
            deeds = " and ".join(person.known_for)
            add(
                name,
                f"{name} is remembered for {deeds}. {person.surname} died in {person.died}, "
                f"aged {person.died - person.born}.",
            )
    for ship, info in world.ships.items():
        add(
            f"{ship} (ship)",
            f"The {ship} was a {info['kind']} of {info['tons']} tons built by the shipwright "
            f"{info['builder']} and launched in {info['launched']}. Her home port was "
            f"{info['port']}.",
        )
    for title, info in world.books.items():
        add(
            title,
            f"{title} is a book by {info['author']}, first published in {info['published']}. "
            f"Much of it concerns the island of {info['subject']}.",
        )
    for mountain, info in world.mountains.items():
        add(
            mountain,
            f"{mountain} is a mountain on the island of {info['island']}, {info['height_m']} "
            f"metres high. The first recorded ascent was made in {info['first_ascent']} by "
            f"{info['first_ascent_by']}.",
        )
    for light, info in world.lighthouses.items():
        add(
            light,
            f"{light} is a lighthouse near {info['town']}, {info['height_m']} metres tall. It "
            f"was designed by the engineer {info['designer']} and first lit in {info['built']}.",
        )
    return out


# ---- questions --------------------------------------------------------------------------


def _q(question: str, answers: list[str], hops: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "question": question,
        "golden_answers": answers,
        "hops": [{"query": q, "evidence": e} for q, e in hops],
    }


def write_questions(world: World, seed: int = SEED) -> list[dict[str, Any]]:
    rng = random.Random(seed + 2)
    one_hop: list[dict[str, Any]] = []
    two_hop: list[dict[str, Any]] = []
    P = world.people
    for town in world.towns.values():
        one_hop.append(
            _q(
                f"In what year was the town of {town.name} founded?",
                [str(town.founded)],
                [(f"{town.name} town founded", str(town.founded))],
            )
        )
        one_hop.append(
            _q(
                f"Who founded the town of {town.name}?",
                [town.founder],
                [(f"{town.name} founded by", town.founder)],
            )
        )
        one_hop.append(
            _q(
                f"On which river does {town.name} stand?",
                [town.river, f"River {town.river}", f"{town.river} River"],
                [(f"{town.name} river", f"River {town.river}")],
            )
        )
        founder = P[town.founder]
        two_hop.append(
            _q(
                f"In what year was the founder of {town.name} born?",
                [str(founder.born)],
                [
                    (f"{town.name} founded by", town.founder),
                    (f"{town.founder} born", f"born in {founder.born}"),
                ],
            )
        )
        two_hop.append(
            _q(
                f"Where was the founder of {town.name} born?",
                [founder.birthplace],
                [
                    (f"{town.name} founded by", town.founder),
                    (f"{town.founder} born", f"in {founder.birthplace}"),
                ],
            )
        )
    for ship, info in world.ships.items():
        one_hop.append(
            _q(
                f"Who built the ship {ship}?",
                [info["builder"]],
                [(f"{ship} ship built by", info["builder"])],
            )
        )
        wright = P[info["builder"]]
        two_hop.append(
            _q(
                f"In which town was the builder of the ship {ship} born?",
                [wright.birthplace],
                [
                    (f"{ship} ship built by", info["builder"]),
                    (f"{wright.name} born", f"in {wright.birthplace}"),
                ],
            )
        )
        port = world.towns[info["port"]]
        two_hop.append(
            _q(
                f"On which island was the home port of the {ship}?",
                [port.island, f"{port.island} Island"],
                [(f"{ship} ship home port", port.name), (f"{port.name} island", port.island)],
            )
        )
    for title, info in world.books.items():
        one_hop.append(
            _q(f"Who wrote {title}?", [info["author"]], [(f"{title} book", info["author"])])
        )
        author = P[info["author"]]
        two_hop.append(
            _q(
                f"In what year was the author of {title} born?",
                [str(author.born)],
                [
                    (f"{title} book", info["author"]),
                    (f"{author.name} born", f"born in {author.born}"),
                ],
            )
        )
    for mountain, info in world.mountains.items():
        one_hop.append(
            _q(
                f"Who made the first recorded ascent of {mountain}?",
                [info["first_ascent_by"]],
                [(f"{mountain} first ascent", info["first_ascent_by"])],
            )
        )
        climber = P[info["first_ascent_by"]]
        if climber.mentor:
            two_hop.append(
                _q(
                    f"Under whom did the first climber of {mountain} study?",
                    [climber.mentor],
                    [
                        (f"{mountain} first ascent", climber.name),
                        (f"{climber.name} studied under", climber.mentor),
                    ],
                )
            )
    for light, info in world.lighthouses.items():
        one_hop.append(
            _q(
                f"Who designed {light}?",
                [info["designer"]],
                [(f"{light} lighthouse designed", info["designer"])],
            )
        )
        one_hop.append(
            _q(
                f"In what year was {light} first lit?",
                [str(info["built"])],
                [(f"{light} lighthouse first lit", str(info["built"]))],
            )
        )
    for river, info in world.rivers.items():
        one_hop.append(
            _q(
                f"Into which body of water does the River {river} empty?",
                [info["mouth"], info["mouth"].removeprefix("the ")],
                [(f"River {river} empties into", info["mouth"])],
            )
        )
    rng.shuffle(one_hop)
    rng.shuffle(two_hop)
    chosen = one_hop[:90] + two_hop[:60]
    rng.shuffle(chosen)
    for i, question in enumerate(chosen):
        question["id"] = f"serran-{i:03d}"
        question["kind"] = "two_hop" if len(question["hops"]) > 1 else "one_hop"
    return [{"id": q["id"], **{k: v for k, v in q.items() if k != "id"}} for q in chosen]


def write_files(out_dir: str | Path, seed: int = SEED) -> dict[str, int]:
    """Write corpus.jsonl, questions_train.jsonl and questions_test.jsonl into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = build_world(seed)
    passages = write_passages(world, seed)
    questions = write_questions(world, seed)
    test = [q for i, q in enumerate(questions) if i % 5 == 4]
    train = [q for i, q in enumerate(questions) if i % 5 != 4]
    files = {"corpus.jsonl": passages, "questions_train.jsonl": train, "questions_test.jsonl": test}
    for name, rows in files.items():
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (out / name).write_text(text, encoding="utf-8")
    return {name: len(rows) for name, rows in files.items()}


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "data")
    print(write_files(target))
