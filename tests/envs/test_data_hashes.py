"""Content hashes of data sources: by content not path, once per process, folders whole;
and what each flagship environment declares it reads."""

from __future__ import annotations

import os
import shutil

import pytest

from agentenvs.envs import make
from agentenvs.envs.data_hashes import MISSING, data_digests, file_digest, source_digest
from agentenvs.envs.search_r1.corpus import default_corpus_path


def test_the_same_bytes_anywhere_hash_alike_and_one_byte_changes_it(tmp_path):
    one, two = tmp_path / "a.jsonl", tmp_path / "b" / "c.jsonl"
    two.parent.mkdir()
    one.write_bytes(b'{"id": 1}\n' * 1000)
    shutil.copy(one, two)
    assert file_digest(one) == file_digest(two) and len(file_digest(one)) == 16
    two.write_bytes(b'{"id": 2}\n' + b'{"id": 1}\n' * 999)
    assert file_digest(one) != file_digest(two)


def test_a_file_is_read_once_until_it_changes_on_disk(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"first version\n")
    before, stat = file_digest(path), path.stat()
    path.write_bytes(b"other version\n")  # same size: only the modification time tells
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_digest(path) == before  # kept, not read again
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert file_digest(path) != before


def test_a_folder_hashes_every_file_by_relative_name(tmp_path):
    for name in ("x", "y"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "game.tw-pddl").write_text("(define ...)")
        (tmp_path / name / "traj_data.json").write_text("{}")
    (tmp_path / "y" / ".hidden").write_text("editor state")
    assert source_digest(tmp_path / "x") == source_digest(tmp_path / "y")
    (tmp_path / "y" / "sub" / "game.tw-pddl").rename(tmp_path / "y" / "sub" / "other.tw-pddl")
    assert source_digest(tmp_path / "x") != source_digest(tmp_path / "y")
    assert source_digest(tmp_path / "nowhere") == MISSING


@pytest.mark.parametrize(
    ("env", "options", "names"),
    [
        ("search_r1", {}, ["corpus", "questions/test", "questions/train"]),
        ("search_r1", {"retriever": {"kind": "http"}}, ["questions/test", "questions/train"]),
        ("retool", {}, ["problems/eval", "problems/train"]),
        ("alfworld", {"data": "shipped"}, ["games"]),
    ],
)
def test_each_flagship_declares_what_it_reads(env, options, names):
    digests = data_digests(make(env, **options).data_sources())
    assert list(digests) == names and MISSING not in digests.values()


def test_a_corpus_given_elsewhere_is_hashed_by_its_content(tmp_path):
    copy = tmp_path / "corpus.jsonl"
    shutil.copy(default_corpus_path(), copy)
    shipped = data_digests(make("search_r1").data_sources())
    elsewhere = data_digests(make("search_r1", retriever={"corpus": str(copy)}).data_sources())
    assert elsewhere == shipped
    copy.write_text(copy.read_text().replace("a", "b", 1))
    changed = data_digests(make("search_r1", retriever={"corpus": str(copy)}).data_sources())
    assert changed["corpus"] != shipped["corpus"]
    assert changed["questions/train"] == shipped["questions/train"]
