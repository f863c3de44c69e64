"""Engine-agnostic scenarios: drive an adapter through a data-flow arrow and observe."""
