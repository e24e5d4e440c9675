from streams.agents.deadlines import DeadlineTracker


def test_deadlines_come_due_earliest_first_whatever_the_order_they_were_set_in() -> None:
    tracker = DeadlineTracker()
    tracker.add(30.0, "late.example", "/a")
    tracker.add(10.0, "early.example", "/b")
    tracker.add(20.0, "middle.example", "/c")
    assert tracker.pop_due(15.0) == [("early.example", "/b")]
    assert tracker.pop_due(40.0) == [("middle.example", "/c"), ("late.example", "/a")]
    assert len(tracker) == 0


def test_a_shape_ticks_once_at_its_earliest_deadline() -> None:
    tracker = DeadlineTracker()
    for deadline in (50.0, 60.0, 20.0, 30.0):
        tracker.add(deadline, "a.example", "/p")
    assert len(tracker) == 1
    assert tracker.pop_due(25.0) == [("a.example", "/p")]
    assert tracker.pop_due(100.0) == [], "the later deadlines were superseded"
    tracker.add(70.0, "a.example", "/p")
    assert tracker.pop_due(100.0) == [("a.example", "/p")], "set again after it ticked"


def test_the_number_of_shapes_is_bounded() -> None:
    tracker = DeadlineTracker(max_entries=2)
    for number in range(5):
        tracker.add(float(number), f"d{number}.example", "/p")
    tracker.add(0.5, "d0.example", "/p")
    assert tracker.pop_due(10.0) == [("d0.example", "/p"), ("d1.example", "/p")]


def test_discard_forgets_a_shape_and_add_still_keeps_the_earliest() -> None:
    """A handled tick whose record has nothing waiting discards the shape's follow-up tick;
    a record's later deadline never postpones an earlier one (a shape updated every
    second would otherwise never tick)."""
    tracker = DeadlineTracker()
    tracker.add(5.0, "shop.test", "/p")
    tracker.discard("shop.test", "/p")
    assert tracker.pop_due(100.0) == []
    tracker.add(5.0, "shop.test", "/p")
    tracker.add(20.0, "shop.test", "/p")
    assert tracker.pop_due(5.0) == [("shop.test", "/p")]
    assert len(tracker) == 0
