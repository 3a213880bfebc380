import pytest

from ustun.errors import IllegalTransition
from ustun.webhooks.states import TRANSITIONS, Change, Status, transition


def test_the_happy_and_unhappy_paths() -> None:
    assert transition("pending", Change.SUCCEED) is Status.SUCCEEDED
    assert transition("pending", Change.FAIL) is Status.FAILED
    assert transition("failed", Change.FAIL) is Status.FAILED
    assert transition("failed", Change.GIVE_UP) is Status.DEAD
    assert transition("dead", Change.RESEND) is Status.PENDING


@pytest.mark.parametrize("change", [Change.SUCCEED, Change.FAIL, Change.GIVE_UP])
@pytest.mark.parametrize("final", [Status.SUCCEEDED, Status.DEAD])
def test_final_states_only_resend(final: Status, change: Change) -> None:
    assert (final, change) not in TRANSITIONS
    with pytest.raises(IllegalTransition):
        transition(final, change)


def test_an_illegal_change_names_the_status_it_would_lead_to() -> None:
    with pytest.raises(IllegalTransition) as raised:
        transition(Status.SUCCEEDED, Change.GIVE_UP)
    assert (raised.value.current, raised.value.target) == ("succeeded", "dead")
