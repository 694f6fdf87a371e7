"""`dir(proctor)` is the public index: no imports or helpers of the module itself."""

import proctor


def test_dir_lists_only_public_names() -> None:
    names = dir(proctor)
    assert set(names) == {*proctor.__all__, "__version__"}
    for private in ("Any", "importlib", "annotations", "TYPE_CHECKING", "_EXPORTS"):
        assert private not in names
    proctor.Taskset  # noqa: B018  (a lazy load must not add its module to the listing)
    assert dir(proctor) == names
