"""Executors, one per target type (``schemas.targets`` declares the types): ``base`` the
contract, ``setup`` how a worker builds one per registered type through the factory
each module has (``executor``), ``pool`` the run threads."""
