from ustun.jobs import Registry

kinds = Registry()
