"""The judge's model of a paged pool (graders.serving.model.Book), on its own: every serving verdict
is a comparison with it, so it must be the contract, step by step. No candidate is graded here.

Block names are the book's own: 1, 2, 3, ... in the order blocks are taken.
"""

from __future__ import annotations

import pytest

from graders.serving.model import Book, Full


def book_with(num_blocks: int = 8, block_size: int = 4, **lengths: int) -> Book:
    """A book holding sequences named by `lengths`, added and appended in that order."""
    book = Book(num_blocks, block_size)
    for seq, n in lengths.items():
        book.add(seq)
        if n:
            book.append(seq, n)
    return book


# Allocation


def test_a_sequence_takes_ceil_of_its_length_over_the_block_size():
    book = book_with(a=0)
    assert book.tables["a"] == [] and book.num_free == 8
    book.append("a", 1)
    assert book.tables["a"] == [1]
    book.append("a", 3)  # fills block 1
    assert book.tables["a"] == [1]
    book.append("a", 6)  # 10 positions: 3 blocks
    assert book.tables["a"] == [1, 2, 3] and book.lengths["a"] == 10 and book.num_free == 5


def test_sequences_take_blocks_in_turn():
    book = book_with(a=5, b=2)
    book.append("a", 4)
    assert book.tables == {"a": [1, 2, 4], "b": [3]}


def test_an_append_that_does_not_fit_raises_full_and_changes_nothing():
    book = book_with(num_blocks=3, a=4, b=4)
    with pytest.raises(Full):
        book.append("a", 5)  # 2 more blocks, 1 free
    assert book.tables == {"a": [1], "b": [2]} and book.lengths["a"] == 4 and book.num_free == 1
    book.append("a", 4)  # exactly the last block
    assert book.num_free == 0


def test_unknown_sequences_raise_key_error_and_ids_are_unique():
    book = book_with(a=1)
    with pytest.raises(KeyError):
        book.append("b", 1)
    with pytest.raises(KeyError):
        book.fork("b", "c")
    with pytest.raises(ValueError):
        book.add("a")


# Reference counts and copy-on-write


def test_fork_shares_every_block_and_takes_none():
    book = book_with(a=6)
    book.fork("a", "b")
    assert book.tables["b"] == book.tables["a"] == [1, 2]
    assert book.lengths["b"] == 6 and book.holders == {1: 2, 2: 2} and book.num_free == 6
    assert book.ever_shared == {1, 2}


def test_a_write_into_a_shared_partial_block_copies_it_once():
    book = book_with(a=6)
    book.fork("a", "b")
    book.append("b", 1)  # block 2 is shared and partly filled: b gets a copy
    assert book.tables == {"a": [1, 2], "b": [1, 3]} and book.holders == {1: 2, 2: 1, 3: 1}
    book.append("a", 1)  # block 2 is a's alone now: written in place
    assert book.tables["a"] == [1, 2] and book.num_free == 5


def test_a_fork_at_a_block_boundary_never_copies():
    book = book_with(a=8)
    book.fork("a", "b")
    book.append("b", 3)
    book.append("a", 5)
    assert book.tables == {"a": [1, 2, 4, 5], "b": [1, 2, 3]} and book.holders[1] == 2


def test_a_copy_counts_toward_what_an_append_needs():
    book = book_with(num_blocks=3, a=6)
    book.fork("a", "b")
    book.add("c")
    book.append("c", 1)  # the last free block
    with pytest.raises(Full):
        book.append("b", 1)  # needs a copy of block 2, none free
    assert book.tables["b"] == [1, 2] and book.holders[2] == 2
    book.append("c", 3)  # c's partial block is its own: fits with none free
    assert book.num_free == 0


def test_forks_of_forks_count_every_holder():
    book = book_with(a=5)
    book.fork("a", "b")
    book.fork("b", "c")
    assert book.holders == {1: 3, 2: 3}
    book.append("c", 1)
    assert book.holders == {1: 3, 2: 2, 3: 1}


# Free


def test_free_returns_only_blocks_no_one_else_holds():
    book = book_with(a=6)
    book.fork("a", "b")
    book.append("b", 1)  # b: [1, 3]
    book.free("a")
    assert book.holders == {1: 1, 3: 1} and book.num_free == 6
    book.free("b")
    assert book.holders == {} and book.num_free == 8 and book.tables == {}


def test_free_of_an_unknown_or_freed_sequence_raises_key_error():
    book = book_with(a=3)
    book.free("a")
    with pytest.raises(KeyError):
        book.free("a")
    with pytest.raises(KeyError):
        book.free("never added")


def test_a_freed_id_can_be_added_again_and_blocks_are_reused_by_count():
    book = book_with(num_blocks=2, a=8)
    book.free("a")
    book.add("a")
    book.append("a", 8)  # the pool is back: two blocks, under new names
    assert book.tables["a"] == [3, 4] and book.num_free == 0


# Admission reservations


def test_admit_reserves_ceil_of_max_tokens_over_the_block_size():
    book = Book(10, 4)
    assert book.admit("a", 21)  # 6 blocks promised
    assert book.reserved == {"a": 6} and book.num_free == 10 and book.unreserved() == 4
    book.append("a", 1)  # paid from the reservation
    assert book.reserved == {"a": 5} and book.num_free == 9 and book.unreserved() == 4


def test_admission_counts_the_blocks_promised_to_others():
    book = Book(10, 4)
    book.admit("a", 21)
    book.append("a", 1)
    assert not book.can_admit(20) and not book.admit("b", 20)  # 5 blocks, 4 unreserved
    assert "b" not in book.tables and book.can_admit(16)


def test_a_sequence_without_a_reservation_cannot_take_promised_blocks():
    book = Book(10, 4)
    book.admit("a", 21)
    book.append("a", 1)
    book.add("c")
    book.append("c", 16)  # the 4 unreserved blocks
    with pytest.raises(Full):
        book.append("c", 1)  # 5 blocks are free, all promised to a
    book.append("a", 20)  # a grows to its 21 tokens
    assert book.reserved["a"] == 0 and book.num_free == 0


def test_free_releases_what_is_left_of_a_reservation():
    book = Book(10, 4)
    book.admit("d", 40)
    book.append("d", 1)
    assert not book.admit("e", 4)
    book.free("d")
    assert book.reserved == {} and book.admit("e", 4)


# Eviction order


def test_evict_takes_the_newest_sequence_still_present():
    book = book_with(num_blocks=64, m=5)
    book.admit("c", 12)
    book.add("x")
    book.fork("m", "k")  # fork's dst is added too, after c and x
    book.free("x")
    assert not book.admit("zz", 1000)  # refused: never added
    assert [book.evict() for _ in range(3)] == ["k", "c", "m"]
    with pytest.raises(ValueError):
        book.evict()


def test_an_evicted_sequence_is_gone_and_its_blocks_free():
    book = book_with(a=4, b=6)
    assert book.evict() == "b" and book.tables == {"a": [1]} and book.num_free == 7
    book.add("b")  # the id is free again, and newest once more
    assert book.evict() == "b"
