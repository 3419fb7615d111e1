"""Generates ``stories.txt``, the small corpus shipped with ``orion train`` (no downloads).

Short children's stories in the spirit of TinyStories, assembled from hand-written templates with a
fixed seed, one story per paragraph (blank-line separated). Run ``python make_corpus.py`` to rebuild;
the output is deterministic.
"""

from __future__ import annotations

import os
import random

NAMES = ["Lily", "Tom", "Mia", "Ben", "Sara", "Max", "Anna", "Sam", "Lucy", "Jack", "Emma", "Leo", "Zoe", "Tim",
         "Ella", "Finn", "Rosa", "Noah", "Ivy", "Oscar"]
ANIMALS = [("cat", "soft"), ("dog", "happy"), ("bunny", "small"), ("bird", "little"), ("fox", "clever"),
           ("bear", "big"), ("duck", "yellow"), ("frog", "green"), ("mouse", "tiny"), ("owl", "wise")]
KIDS = ["girl", "boy"]
PLACES = [("house", "near the big tree"), ("farm", "by the river"), ("village", "under the hill"),
          ("garden", "behind the school"), ("forest", "far away"), ("town", "by the sea"), ("park", "next to the lake")]
ACTIVITIES = ["play with a red ball", "run in the grass", "look at the clouds", "sing songs", "build towers of blocks",
              "paint pictures", "jump in the puddles", "read books with pictures", "pick flowers", "fly a kite"]
OBJECTS = [("a shiny stone", "it"), ("a little key", "it"), ("a blue box", "it"), ("an old hat", "it"),
           ("a lost puppy", "him"), ("a broken toy", "it"), ("a big leaf", "it"), ("a small egg", "it"),
           ("a golden feather", "it"), ("a funny map", "it")]
FOUND = ["under a rock", "in the sand", "behind the door", "next to the tree", "in the tall grass", "on the path",
         "near the pond", "in the garden"]
FEELINGS = ["happy", "sad", "scared", "curious", "excited", "surprised", "proud", "tired"]
FRIENDS = [("a kind old man", "he"), ("a friendly dog", "it"), ("a little bird", "it"), ("a wise owl", "it"),
           ("a girl named {n}", "she"), ("a boy named {n}", "he"), ("mom", "she"), ("dad", "he")]
PROBLEMS = [("it started to rain", "they found a warm place to wait until the sun came back"),
            ("the ball rolled into the river", "they used a long stick to get it back"),
            ("the kite got stuck in a tree", "they asked a tall friend to help them"),
            ("it was getting dark", "they followed the moon all the way home"),
            ("the little box would not open", "they found the right key and opened it"),
            ("the bridge was broken", "they built a new one with sticks and stones"),
            ("they were very hungry", "they shared their bread and apples")]
MORALS = ["It is good to share with friends.", "Being kind makes everyone happy.", "Always tell the truth.",
          "Friends help each other.", "It is fun to try new things.", "Be careful, and ask for help when you need it.",
          "Saying sorry makes things better.", "Every day can be an adventure."]
ENDINGS = ["From that day on, {name} and {friend} were best friends.", "{Name} smiled and went to sleep.",
           "They laughed and played until the sun went down.", "{Name} was very {feel} and hugged {friend}.",
           "And they lived happily ever after.", "{Name} never forgot that special day."]


def story(r: random.Random) -> str:
    name = r.choice(NAMES)
    if r.random() < 0.5:
        animal, adj = r.choice(ANIMALS)
        who = f"a {adj} {animal} named {name}"
        pron = r.choice(["he", "she"])
    else:
        kid = r.choice(KIDS)
        who = f"a little {kid} named {name}"
        pron = "she" if kid == "girl" else "he"
    Pron = pron.capitalize()
    place, where = r.choice(PLACES)
    act1, act2 = r.sample(ACTIVITIES, 2)
    obj, obj_p = r.choice(OBJECTS)
    found = r.choice(FOUND)
    feel1, feel2 = r.sample(FEELINGS, 2)
    friend, fpron = r.choice(FRIENDS)
    friend = friend.format(n=r.choice([n for n in NAMES if n != name]))
    problem, solution = r.choice(PROBLEMS)
    start = r.choice(["Once upon a time, there was", "One day, there was", "Long ago, there lived", "There once was"])
    parts = [f"{start} {who}.", f"{Pron} lived in a {place} {where}.", f"Every day, {name} liked to {act1}."]
    if r.random() < 0.6:
        parts.append(f"{Pron} also liked to {act2} with {friend}.")
    parts += [f"One day, {name} found {obj} {found}.", f"{Pron} felt {feel1} and wanted to show {obj_p} to {friend}.",
              f"\"Look what I found!\" said {name}.", f"{friend[0].upper() + friend[1:]} looked and said, "
              f"\"Wow, that is {r.choice(['beautiful', 'amazing', 'strange', 'very special', 'so pretty'])}!\""]
    parts.append(f"But then {problem}.")
    parts.append(f"{name} and {friend} did not give up, and {solution}.")
    if r.random() < 0.5:
        parts.append(f"{name} felt {feel2}.")
    end = r.choice(ENDINGS).format(name=name, Name=name, friend=friend, feel=r.choice(["happy", "glad", "proud"]))
    parts.append(end)
    if r.random() < 0.5:
        parts.append(r.choice(MORALS))
    return " ".join(parts)


def generate(n: int = 520, seed: int = 20240917) -> str:
    r = random.Random(seed)
    return "\n\n".join(story(r) for _ in range(n)) + "\n"


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stories.txt")
    with open(out, "w", encoding="utf-8") as f:
        f.write(generate())
    print(out, os.path.getsize(out), "bytes")
