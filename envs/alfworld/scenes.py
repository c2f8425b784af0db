"""The rooms and tasks of the ALFWorld games shipped with agentenvs.

The real ALFWorld dataset cannot be downloaded here, so the package ships games
written for this project: each is a room (receptacle types and counts, as in the
AI2-THOR floor plans ALFWorld was built from), the objects that matter for the
task at fixed places, seeded clutter elsewhere, and one of ALFWorld's six task
types. :mod:`agentenvs.envs.alfworld.build_games` turns these specs into PDDL
problems against the installed ``alfred.pddl`` domain.

Everything here is plain data so the games are reproducible from the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""ALFWorld's six task types, in its own numbering order (1..6)."""


@dataclass(frozen=True)
class Room:
    """A room layout: receptacle type (ALFRED class name) -> how many there are."""

    name: str
    kind: str
    """kitchen, bedroom, livingroom, bathroom: picks the clutter."""
    receptacles: dict[str, int]

    @property
    def size(self) -> int:
        return sum(self.receptacles.values())


@dataclass(frozen=True)
class Placement:
    """One object of ``obj`` type inside receptacle number ``index`` of type ``recep``."""

    obj: str
    recep: str
    index: int = 1


@dataclass(frozen=True)
class GameSpec:
    name: str
    split: str
    task_type: str
    room: Room
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""
    placements: tuple[Placement, ...] = ()
    clutter: int = 0
    """How many extra objects to scatter (seeded; never of the target types)."""
    template: int = 0
    """Which of ALFWorld's goal sentences for the task type to use."""
    seed: int = 0
    extra: dict[str, str] = field(default_factory=dict)


# ---- rooms --------------------------------------------------------------------------
KITCHEN_LARGE = Room(
    "kitchen33",
    "kitchen",
    {
        "Cabinet": 12,
        "CoffeeMachine": 1,
        "CounterTop": 2,
        "DiningTable": 1,
        "Drawer": 5,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "Shelf": 3,
        "SinkBasin": 1,
        "StoveBurner": 4,
        "Toaster": 1,
    },
)
KITCHEN_MEDIUM = Room(
    "kitchen17",
    "kitchen",
    {
        "Cabinet": 6,
        "CoffeeMachine": 1,
        "CounterTop": 1,
        "DiningTable": 1,
        "Drawer": 2,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "SinkBasin": 1,
        "StoveBurner": 2,
    },
)
KITCHEN_ALT = Room(
    "kitchen25",
    "kitchen",
    {
        "Cabinet": 9,
        "CoffeeMachine": 1,
        "CounterTop": 3,
        "Drawer": 3,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "SinkBasin": 1,
        "StoveBurner": 4,
        "Toaster": 1,
    },
)
KITCHEN_SMALL = Room(
    "kitchen7",
    "kitchen",
    {"Cabinet": 2, "CounterTop": 1, "Fridge": 1, "GarbageCan": 1, "Microwave": 1, "SinkBasin": 1},
)
BEDROOM = Room(
    "bedroom21",
    "bedroom",
    {
        "ArmChair": 1,
        "Bed": 1,
        "Desk": 1,
        "Drawer": 8,
        "Dresser": 1,
        "GarbageCan": 1,
        "LaundryHamper": 1,
        "Safe": 1,
        "Shelf": 4,
        "SideTable": 2,
    },
)
BEDROOM_ALT = Room(
    "bedroom12",
    "bedroom",
    {"Bed": 1, "Desk": 1, "Drawer": 4, "GarbageCan": 1, "Shelf": 3, "SideTable": 2},
)
STUDY_SMALL = Room(
    "study6",
    "bedroom",
    {"Desk": 1, "Drawer": 2, "GarbageCan": 1, "Shelf": 1, "SideTable": 1},
)
LIVINGROOM = Room(
    "livingroom16",
    "livingroom",
    {
        "ArmChair": 1,
        "Cabinet": 2,
        "CoffeeTable": 1,
        "DiningTable": 1,
        "Drawer": 4,
        "GarbageCan": 1,
        "Shelf": 2,
        "SideTable": 2,
        "Sofa": 1,
        "TVStand": 1,
    },
)
BATHROOM = Room(
    "bathroom13",
    "bathroom",
    {
        "BathtubBasin": 1,
        "Cabinet": 4,
        "CounterTop": 1,
        "GarbageCan": 1,
        "HandTowelHolder": 1,
        "SinkBasin": 2,
        "Toilet": 1,
        "ToiletPaperHanger": 1,
        "TowelHolder": 1,
    },
)

CLUTTER: dict[str, tuple[str, ...]] = {
    "kitchen": (
        "Apple", "Bread", "ButterKnife", "Bowl", "Cup", "DishSponge", "Egg", "Fork", "Kettle",
        "Knife", "Ladle", "Lettuce", "Mug", "Pan", "PepperShaker", "Plate", "Pot", "Potato",
        "SaltShaker", "SoapBottle", "Spatula", "Spoon", "Tomato", "WineBottle",
    ),
    "bedroom": (
        "AlarmClock", "Book", "CD", "CellPhone", "CreditCard", "KeyChain", "Laptop", "Pen",
        "Pencil", "Pillow", "Vase", "Statue", "Watch",
    ),
    "livingroom": (
        "Book", "Box", "CreditCard", "KeyChain", "Laptop", "Newspaper", "Pillow",
        "RemoteControl", "Statue", "Vase", "Watch", "WateringCan",
    ),
    "bathroom": (
        "Candle", "Cloth", "HandTowel", "SoapBar", "SoapBottle", "SprayBottle", "TissueBox",
        "ToiletPaper", "Towel",
    ),
}  # fmt: skip


# ---- games ----------------------------------------------------------------------------
GAMES: tuple[GameSpec, ...] = (
    # pick_and_place_simple
    GameSpec(
        "simple-apple-fridge", "train", "pick_and_place_simple", KITCHEN_SMALL,
        "Apple", "Fridge", placements=(Placement("Apple", "CounterTop"),), clutter=3, seed=1,
    ),
    GameSpec(
        "simple-cellphone-bed", "train", "pick_and_place_simple", BEDROOM,
        "CellPhone", "Bed", placements=(Placement("CellPhone", "Drawer", 3),), clutter=16,
        template=1, seed=2,
    ),
    # look_at_obj_in_light
    GameSpec(
        "look-book-desklamp", "train", "look_at_obj_in_light", STUDY_SMALL,
        "Book", toggle_target="DeskLamp",
        placements=(Placement("DeskLamp", "Desk"), Placement("Book", "Shelf")), clutter=3, seed=3,
    ),
    GameSpec(
        "look-alarmclock-desklamp", "train", "look_at_obj_in_light", BEDROOM,
        "AlarmClock", toggle_target="DeskLamp",
        placements=(Placement("DeskLamp", "SideTable", 2), Placement("AlarmClock", "Dresser")),
        clutter=14, template=1, seed=4,
    ),
    # pick_clean_then_place_in_recep
    GameSpec(
        "clean-lettuce-diningtable", "train", "pick_clean_then_place_in_recep", KITCHEN_LARGE,
        "Lettuce", "DiningTable", placements=(Placement("Lettuce", "Fridge"),), clutter=30, seed=5,
    ),
    GameSpec(
        "clean-cloth-cabinet", "train", "pick_clean_then_place_in_recep", BATHROOM,
        "Cloth", "Cabinet", placements=(Placement("Cloth", "CounterTop"),), clutter=10,
        template=1, seed=6,
    ),
    # pick_heat_then_place_in_recep
    GameSpec(
        "heat-egg-diningtable", "train", "pick_heat_then_place_in_recep", KITCHEN_LARGE,
        "Egg", "DiningTable", placements=(Placement("Egg", "Fridge"),), clutter=30, template=1,
        seed=7,
    ),
    GameSpec(
        "heat-mug-coffeemachine", "train", "pick_heat_then_place_in_recep", KITCHEN_MEDIUM,
        "Mug", "CoffeeMachine", placements=(Placement("Mug", "Cabinet", 4),), clutter=15, seed=8,
    ),
    # pick_cool_then_place_in_recep
    GameSpec(
        "cool-tomato-microwave", "train", "pick_cool_then_place_in_recep", KITCHEN_LARGE,
        "Tomato", "Microwave", placements=(Placement("Tomato", "CounterTop", 2),), clutter=30,
        seed=9,
    ),
    GameSpec(
        "cool-winebottle-cabinet", "train", "pick_cool_then_place_in_recep", KITCHEN_MEDIUM,
        "WineBottle", "Cabinet", placements=(Placement("WineBottle", "DiningTable"),),
        clutter=15, template=1, seed=10,
    ),
    # pick_two_obj_and_place
    GameSpec(
        "two-soapbar-cabinet", "train", "pick_two_obj_and_place", BATHROOM,
        "SoapBar", "Cabinet",
        placements=(
            Placement("SoapBar", "CounterTop"),
            Placement("SoapBar", "BathtubBasin"),
            Placement("SoapBar", "Toilet"),
        ),
        clutter=8, seed=11,
    ),
    GameSpec(
        "two-remotecontrol-sofa", "train", "pick_two_obj_and_place", LIVINGROOM,
        "RemoteControl", "Sofa",
        placements=(Placement("RemoteControl", "CoffeeTable"), Placement("RemoteControl", "Drawer", 2)),
        clutter=12, template=1, seed=12,
    ),
    # valid_seen: rooms seen in train, new tasks
    GameSpec(
        "clean-plate-cabinet", "valid_seen", "pick_clean_then_place_in_recep", KITCHEN_MEDIUM,
        "Plate", "Cabinet", placements=(Placement("Plate", "CounterTop"),), clutter=15, seed=13,
    ),
    GameSpec(
        "simple-saltshaker-drawer", "valid_seen", "pick_and_place_simple", KITCHEN_LARGE,
        "SaltShaker", "Drawer", placements=(Placement("SaltShaker", "Shelf", 2),), clutter=30,
        seed=14,
    ),
    # valid_unseen: rooms not seen in train
    GameSpec(
        "heat-potato-countertop", "valid_unseen", "pick_heat_then_place_in_recep", KITCHEN_ALT,
        "Potato", "CounterTop", placements=(Placement("Potato", "Fridge"),), clutter=24,
        seed=15,
    ),
    GameSpec(
        "look-cd-desklamp", "valid_unseen", "look_at_obj_in_light", BEDROOM_ALT,
        "CD", toggle_target="DeskLamp",
        placements=(Placement("DeskLamp", "Desk"), Placement("CD", "Drawer", 2)), clutter=10,
        seed=16,
    ),
)  # fmt: skip
